package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
)

// Host gives every rank of a job a client of one store server. The rank
// with isServer set (rank 0, by convention) listens on addr, serves the
// store from a goroutine and connects its own client to it; the others
// Dial addr, retrying until the server is up or ctx ends.
//
// The server listens on the addresses of this machine that addr's host
// names, not on every interface (Options.ListenHost says otherwise): see
// listenHosts for the cases where it falls back to every interface.
//
// Closing the hosting rank's client also stops the server, so that rank
// should close it last, after the others are done with the store.
func Host(ctx context.Context, addr string, isServer bool, opts Options) (*Client, error) {
	if !isServer {
		return Dial(ctx, addr, opts)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, &OpError{Op: "listen", Addr: addr, Err: err}
	}
	hosts, why := listenHosts(host, opts.ListenHost)
	if why != "" {
		opts.logger().Info("store: listening on every interface", "addr", addr, "why", why)
	}
	lns, err := listenAll(ctx, hosts, port)
	if err != nil {
		return nil, &OpError{Op: "listen", Addr: addr, Err: err}
	}
	srv := NewServer(opts)
	done := make(chan struct{})
	for _, ln := range lns {
		go func() {
			defer func() { done <- struct{}{} }()
			srv.Serve(context.Background(), ln)
		}()
	}
	stop := func() error {
		err := srv.Close()
		for range lns {
			<-done
		}
		return err
	}
	c, err := Dial(ctx, dialAddr(lns[0].Addr()), opts)
	if err != nil {
		stop()
		return nil, err
	}
	c.onClose = stop
	return c, nil
}

// listenHosts returns the hosts the server of addr's host should listen
// on, and, when that is every interface without being asked, why.
//
//   - bind (Options.ListenHost, GOCCL_STORE_BIND) wins when set.
//   - An empty or unspecified host ("", "0.0.0.0", "::") is every
//     interface: the caller asked for it.
//   - An IP is itself if it is an address of this machine (any loopback
//     address is).
//   - A name is each address it resolves to that belongs to one of this
//     machine's interfaces; loopback addresses count only for "localhost",
//     since a machine that maps its own name to 127.0.1.1 (Debian's
//     default) is reached by the other machines at another address.
//
// When none is left (a name that does not resolve, or only to loopback, or
// to a virtual IP this machine does not hold), the server listens on every
// interface, as it always did before: only then would the other ranks
// reach it at all, and this rank was told to host the store.
func listenHosts(host, bind string) ([]string, string) {
	if bind != "" {
		return []string{bind}, ""
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return []string{""}, ""
	}
	if ip := net.ParseIP(host); ip != nil {
		if ip.IsLoopback() || isLocalIP(ip) {
			return []string{ip.String()}, ""
		}
		return []string{""}, fmt.Sprintf("%s is not an address of this machine", host)
	}
	ips, err := net.LookupIP(host)
	if err != nil {
		return []string{""}, fmt.Sprintf("%s does not resolve: %v", host, err)
	}
	loopbackName := host == "localhost" || strings.HasSuffix(host, ".localhost")
	var hosts []string
	for _, ip := range ips {
		if (ip.IsLoopback() && loopbackName) || (!ip.IsLoopback() && isLocalIP(ip)) {
			hosts = append(hosts, ip.String())
		}
	}
	if len(hosts) == 0 {
		return []string{""}, fmt.Sprintf("%s resolves to %v, none an address the other hosts reach this machine at", host, ips)
	}
	return hosts, ""
}

// isLocalIP reports whether ip is an address of one of this machine's
// interfaces.
func isLocalIP(ip net.IP) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// listenAll listens on port at each host. Port 0 becomes the port the
// first listener got, so that all share one. A host this machine cannot
// listen on (an IPv6 address with IPv6 turned off) is skipped while
// another works; a port in use is an error.
func listenAll(ctx context.Context, hosts []string, port string) ([]net.Listener, error) {
	var lc net.ListenConfig
	var lns []net.Listener
	var firstErr error
	for _, h := range hosts {
		ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(h, port))
		if err != nil {
			if errors.Is(err, syscall.EADDRINUSE) {
				for _, l := range lns {
					l.Close()
				}
				return nil, err
			}
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if port == "0" {
			_, port, _ = net.SplitHostPort(ln.Addr().String())
		}
		lns = append(lns, ln)
	}
	if len(lns) == 0 {
		return nil, firstErr
	}
	return lns, nil
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
