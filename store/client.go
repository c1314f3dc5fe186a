package store

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Client is a connection to a store Server. Its methods may be called from
// many goroutines at once; requests are pipelined on one TCP connection, so
// a Get that waits does not hold up a Set from another goroutine.
//
// A Client does not reconnect: once its connection fails, every call
// returns an error wrapping the failure (ErrClosed after Close).
type Client struct {
	addr string
	opts Options
	conn net.Conn

	wmu sync.Mutex // serializes frames on conn
	bw  *bufio.Writer

	mu      sync.Mutex
	pending map[uint64]chan msg
	nextID  uint64
	err     error         // why the connection ended; set once
	broken  chan struct{} // closed when err is set
	readEnd chan struct{} // closed when the reader goroutine returns
	onClose func() error  // extra cleanup (Host's server)
}

var _ Store = (*Client)(nil)

// Dial connects to the store server at addr ("host:port"). Until ctx ends
// (or Options.Timeout passes, when ctx has no deadline) it retries with
// backoff, so clients may start before the server. A failed
// authentication is not retried.
func Dial(ctx context.Context, addr string, opts Options) (*Client, error) {
	ctx, cancel := withTimeout(ctx, opts.timeout())
	defer cancel()
	backoff := 10 * time.Millisecond
	var lastErr error
	for {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			var c *Client
			c, err = handshake(ctx, conn, addr, opts)
			if err == nil {
				return c, nil
			}
			conn.Close()
			if errors.Is(err, ErrAuth) || errors.Is(err, ErrProtocol) {
				return nil, &OpError{Op: "dial", Addr: addr, Err: err}
			}
		}
		if ctx.Err() != nil {
			if lastErr == nil {
				lastErr = err
			}
			return nil, &OpError{Op: "dial", Addr: addr, Err: fmt.Errorf("%w (last error: %v)", ctx.Err(), lastErr)}
		}
		lastErr = err
		// Jitter keeps a crowd of ranks from knocking in step.
		var j [1]byte
		rand.Read(j[:])
		sleep := backoff + backoff*time.Duration(j[0])/512
		t := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}

// handshake reads the server's hello, authenticates if needed and starts
// the reader goroutine.
func handshake(ctx context.Context, conn net.Conn, addr string, opts Options) (*Client, error) {
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	br := bufio.NewReader(conn)
	limit := opts.maxMessage()
	hello, err := readMsg(br, limit)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	if hello.op != opHello || len(hello.args) != 3 || string(hello.args[0]) != protoMagic ||
		len(hello.args[1]) != nonceLen || len(hello.args[2]) != 1 {
		return nil, fmt.Errorf("%w: not a goccl store server", ErrProtocol)
	}
	serverNonce, needAuth := hello.args[1], hello.args[2][0]&1 != 0
	c := &Client{
		addr:    addr,
		opts:    opts,
		conn:    conn,
		bw:      bufio.NewWriter(conn),
		pending: make(map[uint64]chan msg),
		nextID:  1,
		broken:  make(chan struct{}),
		readEnd: make(chan struct{}),
	}
	switch {
	case !needAuth && len(opts.Secret) == 0:
		// The server closes a connection whose first message does not
		// come within its handshake timeout, and this client may stay
		// idle for longer before its first call: greet it now with a
		// request that every server version takes and none answers (a
		// cancel of request 0, which is never used).
		if err := c.write(&msg{op: opCancel, id: 0}); err != nil {
			return nil, err
		}
	case needAuth && len(opts.Secret) == 0:
		return nil, fmt.Errorf("%w: the server needs a secret and none is configured", ErrAuth)
	case !needAuth && len(opts.Secret) != 0:
		return nil, fmt.Errorf("%w: a secret is configured but the server does not check it", ErrAuth)
	case needAuth:
		var cn [nonceLen]byte
		rand.Read(cn[:])
		if err := c.write(&msg{op: opAuth, args: [][]byte{cn[:], authMAC(opts.Secret, "client", serverNonce, cn[:])}}); err != nil {
			return nil, err
		}
		r, err := readMsg(br, limit)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("%w: server closed the connection during authentication: %v", ErrAuth, err)
		}
		if r.op == opErr {
			return nil, remoteError(r)
		}
		want := authMAC(opts.Secret, "server", cn[:], serverNonce)
		if r.op != opOK || len(r.args) != 1 || !hmac.Equal(r.args[0], want) {
			return nil, fmt.Errorf("%w: the server does not know the secret", ErrAuth)
		}
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		return nil, err
	}
	if !stop() {
		return nil, ctx.Err()
	}
	go c.read(br)
	return c, nil
}

// Addr returns the address the client dialed.
func (c *Client) Addr() string { return c.addr }

func (c *Client) read(br *bufio.Reader) {
	defer close(c.readEnd)
	limit := c.opts.maxMessage()
	for {
		m, err := readMsg(br, limit)
		if err != nil {
			c.fail(fmt.Errorf("%w: connection lost: %w", ErrClosed, err))
			return
		}
		if m.op != opOK && m.op != opErr {
			c.fail(fmt.Errorf("%w: unexpected %v from the server", ErrProtocol, m.op))
			return
		}
		c.mu.Lock()
		ch, ok := c.pending[m.id]
		delete(c.pending, m.id)
		c.mu.Unlock()
		if ok {
			ch <- m
		} else if m.op == opErr && m.id == 0 {
			c.fail(remoteError(m))
			return
		}
	}
}

// fail records why the connection ended (the first reason wins) and
// closes it.
func (c *Client) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = err
	close(c.broken)
	c.conn.Close()
}

func (c *Client) write(m *msg) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if _, err := c.bw.Write(appendMsg(nil, m)); err != nil {
		return err
	}
	return c.bw.Flush()
}

// call sends one request and waits for its response.
func (c *Client) call(ctx context.Context, name, key string, m *msg) (msg, error) {
	wrap := func(err error) error { return &OpError{Op: name, Key: key, Addr: c.addr, Err: err} }
	ctx, cancel := withTimeout(ctx, c.opts.timeout())
	defer cancel()
	if err := checkEncodable(m, c.opts.maxMessage()); err != nil {
		return msg{}, wrap(err)
	}
	ch := make(chan msg, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return msg{}, wrap(err)
	}
	m.id = c.nextID
	c.nextID++
	c.pending[m.id] = ch
	c.mu.Unlock()
	if err := ctx.Err(); err != nil {
		c.forget(m.id)
		return msg{}, wrap(err)
	}
	if err := c.write(m); err != nil {
		// A partly written frame leaves the stream unusable.
		c.fail(fmt.Errorf("%w: write: %w", ErrClosed, err))
		c.mu.Lock()
		err = c.err
		c.mu.Unlock()
		return msg{}, wrap(err)
	}
	var r msg
	select {
	case r = <-ch:
	case <-ctx.Done():
		if !c.forget(m.id) {
			r = <-ch // the response arrived meanwhile
			break
		}
		if m.op == opGet || m.op == opWait {
			// Tell the server to stop waiting; ignore failure, since the
			// connection is then lost anyway.
			c.write(&msg{op: opCancel, id: m.id})
		}
		return msg{}, wrap(ctx.Err())
	case <-c.broken:
		select {
		case r = <-ch:
		default:
			c.mu.Lock()
			err := c.err
			c.mu.Unlock()
			return msg{}, wrap(err)
		}
	}
	if r.op == opErr {
		return msg{}, wrap(remoteError(r))
	}
	return r, nil
}

// forget removes a pending request; it reports false when the response
// was already dispatched.
func (c *Client) forget(id uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.pending[id]
	delete(c.pending, id)
	return ok
}

func wantArgs(r msg, n int) error {
	if len(r.args) != n {
		return fmt.Errorf("%w: response has %d arguments, want %d", ErrProtocol, len(r.args), n)
	}
	return nil
}

// Set implements Store.
func (c *Client) Set(ctx context.Context, key string, value []byte) error {
	_, err := c.call(ctx, "set", key, &msg{op: opSet, args: [][]byte{[]byte(key), value}})
	return err
}

// SetEphemeral is Set for a key that lives as long as this client's
// connection, like a ZooKeeper ephemeral node: when the connection ends
// (Close, or the process dies), the server deletes the key, unless
// someone has set it to another value since. Ranks use it to say they are
// alive (goccl's Shrink).
func (c *Client) SetEphemeral(ctx context.Context, key string, value []byte) error {
	_, err := c.call(ctx, "set_ephemeral", key, &msg{op: opEphemeral, args: [][]byte{[]byte(key), value}})
	return err
}

// Get implements Store.
func (c *Client) Get(ctx context.Context, key string) ([]byte, error) {
	r, err := c.call(ctx, "get", key, &msg{op: opGet, args: [][]byte{[]byte(key)}})
	if err != nil {
		return nil, err
	}
	if err := wantArgs(r, 1); err != nil {
		return nil, &OpError{Op: "get", Key: key, Addr: c.addr, Err: err}
	}
	return r.args[0], nil
}

// Add implements Store.
func (c *Client) Add(ctx context.Context, key string, delta int64) (int64, error) {
	r, err := c.call(ctx, "add", key, &msg{op: opAdd, args: [][]byte{[]byte(key), putInt64(delta)}})
	if err != nil {
		return 0, err
	}
	if err := wantArgs(r, 1); err != nil {
		return 0, &OpError{Op: "add", Key: key, Addr: c.addr, Err: err}
	}
	v, err := getInt64(r.args[0])
	if err != nil {
		return 0, &OpError{Op: "add", Key: key, Addr: c.addr, Err: err}
	}
	return v, nil
}

// CompareSet implements Store.
func (c *Client) CompareSet(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	r, err := c.call(ctx, "compareset", key, &msg{op: opCompareSet, args: [][]byte{[]byte(key), expected, desired}})
	if err != nil {
		return nil, err
	}
	switch len(r.args) {
	case 1:
		return nil, nil // key missing
	case 2:
		return r.args[0], nil
	}
	return nil, &OpError{Op: "compareset", Key: key, Addr: c.addr, Err: wantArgs(r, 2)}
}

// Wait implements Store.
func (c *Client) Wait(ctx context.Context, keys ...string) error {
	args := make([][]byte, len(keys))
	for i, k := range keys {
		args[i] = []byte(k)
	}
	key := ""
	if len(keys) > 0 {
		key = keys[0]
	}
	_, err := c.call(ctx, "wait", key, &msg{op: opWait, args: args})
	return err
}

// Delete implements Store.
func (c *Client) Delete(ctx context.Context, key string) (bool, error) {
	r, err := c.call(ctx, "delete", key, &msg{op: opDelete, args: [][]byte{[]byte(key)}})
	if err != nil {
		return false, err
	}
	if len(r.args) != 1 || len(r.args[0]) != 1 {
		return false, &OpError{Op: "delete", Key: key, Addr: c.addr, Err: fmt.Errorf("%w: malformed response", ErrProtocol)}
	}
	return r.args[0][0] == 1, nil
}

// NumKeys implements Store.
func (c *Client) NumKeys(ctx context.Context) (int64, error) {
	r, err := c.call(ctx, "numkeys", "", &msg{op: opNumKeys})
	if err != nil {
		return 0, err
	}
	if err := wantArgs(r, 1); err != nil {
		return 0, &OpError{Op: "numkeys", Addr: c.addr, Err: err}
	}
	n, err := getInt64(r.args[0])
	if err != nil {
		return 0, &OpError{Op: "numkeys", Addr: c.addr, Err: err}
	}
	return n, nil
}

// Close closes the connection; calls in progress return an error wrapping
// ErrClosed. A client returned by Host for the hosting rank also stops the
// server. Close is safe to call more than once.
func (c *Client) Close() error {
	c.fail(ErrClosed)
	<-c.readEnd
	c.mu.Lock()
	f := c.onClose
	c.onClose = nil
	c.mu.Unlock()
	if f != nil {
		return f()
	}
	return nil
}
