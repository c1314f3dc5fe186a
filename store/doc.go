// Package store implements the rendezvous key-value store that the ranks
// of a goccl job use to find each other, in the manner of
// torch.distributed's TCPStore and FileStore.
//
// Rank 0 hosts a Server; every rank (rank 0 included) talks to it through
// a Client. Host does both in one call:
//
//	c, err := store.Host(ctx, "10.0.0.1:29500", rank == 0, store.Options{})
//	...
//	c.Set(ctx, "addr/3", myAddr)       // publish
//	peer, err := c.Get(ctx, "addr/0") // waits until rank 0 has published
//	n, err := c.Add(ctx, "arrived", 1) // counters for barriers
//
// Where no rank can listen for the others but all see one filesystem,
// NewFileStore offers the same Store interface over a file. WithPrefix
// gives a job, a group or a retry its own key space inside one store.
//
// # Semantics
//
// Get and Wait block until their keys exist; they block only their caller,
// never other clients nor other calls of the same client. Every call takes
// a context; when it has no deadline, Options.Timeout (default 5 minutes)
// applies. A call that ends with its context returns an *OpError wrapping
// the context's error. Add keeps counters as decimal text.
//
// # Wire protocol
//
// Client and server exchange length-prefixed little-endian frames:
//
//	u32 length | u8 op | u64 request id | u16 nargs | nargs × (u32 len | bytes)
//
// The server opens with a hello (magic "goccl-store/1", a 32-byte nonce,
// whether it needs a secret). Requests carry ids and may be pipelined;
// responses come back in any order, matched by id, which is how a waiting
// Get leaves its connection free. The decoder refuses frames over
// Options.MaxMessage, unknown ops, arguments that overrun the frame and
// trailing bytes, with an error wrapping ErrProtocol, and the server then
// drops the connection.
//
// # Authentication
//
// With Options.Secret set on both sides, the client answers the server's
// nonce with HMAC-SHA256(secret, "client" | server nonce | client nonce)
// and the server answers with HMAC-SHA256(secret, "server" | client nonce |
// server nonce). The server serves no request of a connection that has not
// authenticated, and each side refuses a peer that cannot prove the secret
// (ErrAuth). The exchange keeps stray or misconfigured processes out; it
// does not encrypt traffic.
//
// A server closes a connection that has not authenticated (or, without a
// secret, sent its first message) within Options.HandshakeTimeout (5 s),
// refuses a first frame over MaxPreAuthMessage, and keeps at most
// Options.MaxPending (256) connections waiting to authenticate, closing
// any beyond as it accepts them; so silent clients hold no descriptor for
// long. Host's server listens on the addresses that its address names,
// not on every interface (Options.ListenHost).
//
// # Connections at the server
//
// A job's ranks keep their store connections for the job's life (a
// rank's ephemeral liveness key lives as long as its connection), so on
// Linux an idle connection costs the server no goroutine and no buffer. A
// connection's goroutine reads through a pooled 512-byte buffer; once it
// has waited 100 ms for a request with nothing buffered, it parks the
// connection at the Server's one idle-poller goroutine, which waits in
// epoll on every parked socket (one-shot, for input or hang-up), gives
// the buffer back and ends. When the socket turns readable the poller
// starts a goroutine for it again, which reads the request, or the end of
// the stream and ends the connection as it always has: its waiting Gets
// are cancelled and its ephemeral keys dropped. A parked connection costs
// its socket and 1.1-1.5 KB (TestIdleConnCost). A waiting Get does not
// keep its connection's goroutine: the Get's own goroutine writes the
// reply. Only *net.TCPConn and *net.UnixConn park: a wrapped connection
// (TLS, or one from a caller's net.Listener) may hold bytes it has read
// that no poll of its descriptor would show, and keeps its goroutine,
// blocked in Read, as every connection does on other systems.
package store
