// Package transport defines how goccl moves bytes between ranks: the
// Endpoint and Request interfaces every transport implements, message tags,
// and the matching engine (posted receives and the unexpected-message queue)
// that transports share.
//
// Matcher is that engine: per (peer, tag) a FIFO of posted receives and a
// FIFO of unexpected messages. A transport hands it messages as they arrive
// (Deliver, DeliverOwned, DeliverRef for rendezvous, or DeliverFrom, which
// reads a payload from a socket straight into a posted buffer) and
// Endpoint.Irecv is Matcher.Post. Req is the Request implementation they
// share; it makes its done channel only when someone parks on it. A
// receive posted through a Matcher is recycled once its owner calls
// Release (the optional Releaser interface), so a steady stream of small
// messages allocates nothing; Spinner is the spin-then-park policy a
// transport may give the Matcher for waits on receives. Counting wraps any Endpoint to count messages and bytes per peer,
// which tests compare with an algorithm's cost formula.
//
// Implementations live in sub-packages: transport/mem runs ranks as
// goroutines in one process, transport/tcp connects processes over
// sockets, transport/shm processes of one host over shared memory, and
// transport/ib processes over InfiniBand or RoCE verbs (build tag
// ibverbs; a fake fabric in memory for tests). transport/route puts one of
// them under each peer. goccl.Init chooses (GOCCL_TRANSPORT): under
// "auto", shm within a host and, between hosts, ib when every rank of the
// job has verbs built in and an active port, else tcp. The conformance
// suite in transport/transporttest is run by every one.
package transport
