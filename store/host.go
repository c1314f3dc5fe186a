package store

import (
	"context"
	"net"
)

// Host gives every rank of a job a client of one store server. The rank
// with isServer set (rank 0, by convention) listens on addr, serves the
// store from a goroutine and connects its own client to it; the others
// Dial addr, retrying until the server is up or ctx ends.
//
// Closing the hosting rank's client also stops the server, so that rank
// should close it last, after the others are done with the store.
func Host(ctx context.Context, addr string, isServer bool, opts Options) (*Client, error) {
	if !isServer {
		return Dial(ctx, addr, opts)
	}
	// Listen on every interface at addr's port: a host whose name resolves
	// to 127.0.1.1 (Debian's default) would otherwise accept only local
	// clients.
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, &OpError{Op: "listen", Addr: addr, Err: err}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("", port))
	if err != nil {
		return nil, &OpError{Op: "listen", Addr: addr, Err: err}
	}
	srv := NewServer(opts)
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(context.Background(), ln)
	}()
	c, err := Dial(ctx, dialAddr(ln.Addr()), opts)
	if err != nil {
		srv.Close()
		<-done
		return nil, err
	}
	c.onClose = func() error {
		err := srv.Close()
		<-done
		return err
	}
	return c, nil
}

// dialAddr turns a listening address into one a local client can dial:
// an unspecified host (":29500", "0.0.0.0:29500", "[::]:29500") becomes
// 127.0.0.1, which a dual-stack listener also accepts.
func dialAddr(a net.Addr) string {
	ta, ok := a.(*net.TCPAddr)
	if !ok || (ta.IP != nil && !ta.IP.IsUnspecified()) {
		return a.String()
	}
	return (&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: ta.Port}).String()
}
