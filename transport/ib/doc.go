// Package ib is a transport.Endpoint over InfiniBand or RoCE verbs:
// reliable-connected (RC) queue pairs, one per peer, set up through the
// job's rendezvous store.
//
// The verbs calls the transport makes (open a device, register memory,
// create a completion queue and queue pairs, modify a queue pair through
// INIT, RTR and RTS, post sends and receives, poll and wait) sit behind
// the small Provider, Device, CQ, QP and MR interfaces of verbs.go. Two
// providers implement them:
//
//   - Verbs(), over libibverbs through cgo, built with the ibverbs tag
//     (verbs_cgo.go). Without the tag Verbs().Open returns ErrNotBuilt
//     (stub.go), as device/cuda does without its tag, and the package
//     needs no cgo.
//   - transport/ib/ibfake, a pure-Go fabric in memory: queue pairs with
//     their states, completion queues with a completion channel, memory
//     regions with keys and bounds, SEND, RDMA WRITE (with immediate) and
//     READ, and faults: an error completion injected into a queue pair, a
//     queue pair moved to the error state, a device that vanishes, and a
//     slow completion queue. The whole transport, protocol included, runs
//     over it in the ordinary `go test`.
//
// # Connecting
//
// Connect opens the device named by Config.HCA or GOCCL_IB_HCA
// ("mlx5_0", "mlx5_0:1"; empty: the first device with an active port),
// creates one completion queue and, per peer, a queue pair, moves each to
// INIT and posts its receive slots. The ranks then meet through the store
// (Config.KV, under the job's prefix): each publishes a fresh nonce, then
// for each peer its LID, GID (at GOCCL_IB_GID_INDEX), queue pair number,
// random 24-bit starting PSN, port MTU, slot size and receive depth,
// sealed with HMAC-SHA256 under the job's secret (GOCCL_SECRET) over the
// job, both ranks and the reading peer's nonce. A rank accepts only an
// entry whose MAC it can check against its own nonce, so no one without
// the secret can point a rank at another queue pair, and an entry of an
// earlier job or connection is refused. Each queue pair then goes to RTR
// (path MTU: the smaller of the two ports' active MTUs; the GRH is used
// when either port has no LID, as on RoCE; min RNR timer 12, one
// outstanding RDMA READ) and RTS (Config.Timeout, default 14, about 67 ms;
// Config.RetryCount, default 7; Config.RNRRetry, default 7), and the ranks
// wait until every peer is at RTS before any message moves. Probe (and
// Config.Probe, for any provider) says whether a device can be opened
// here at all: goccl.Init calls it to refuse GOCCL_TRANSPORT=ib early and
// to decide whether `auto` takes ib between hosts (README.md, "Selection
// in goccl.Init").
//
// # Messages
//
// Every peer has Config.RecvDepth (32) receive slots of Config.SlotSize
// (16 KiB) posted and as many send slots, all registered once. A message
// of at most SlotSize-48 bytes goes eagerly: it is copied into a send slot
// behind a 48-byte header and sent; its request completes once it is
// copied. A larger message goes by rendezvous: the sender announces it
// (RTS, with its length), the receiver answers with the address and key of
// the buffer to write into (CTS), and the sender writes the data there
// with one RDMA WRITE with immediate (a message over 1 GiB as several
// writes, the last with the immediate; RC keeps them in order), whose
// completion at the receiver says the data is in place; the send
// completes when the write has. Messages are at most Config.MaxMessage
// (4 GiB). With Config.RendezvousRead the sender instead offers its
// buffer in the announcement, the receiver fetches the data with RDMA READ
// and answers with a fin message, on which the send completes; receivers
// follow each sender's choice, so ranks need not agree. When the receive is already posted the data lands straight in the user's
// buffer; when not, it lands in a pooled buffer that joins the
// unexpected-message queue, and later messages of that tag from that peer
// wait for it so the tag's order holds (other tags move on).
//
// Credits keep a receiver from being overrun: a sender may have at most
// RecvDepth messages that the receiver has not yet consumed (each message,
// and each write with immediate, takes one receive slot). Every header
// carries how many messages its sender has consumed from the other side;
// a rank that has consumed half its slots' worth without sending anything
// returns them in a header-only credit message. The last credit is kept
// for credit messages and goodbyes, so that two ranks that flood each
// other can always tell each other that slots are free. A progress
// goroutine consumes every arriving message at once (into the posted
// receive or the unexpected queue), so credits always come back.
//
// # Registration cache
//
// The buffers of rendezvous messages (a send's source, a receive's
// target, a pooled buffer) are registered through a cache keyed by the
// buffer's address, covering it up to its capacity, so that a buffer that
// a program reuses is registered once. The cache holds a reference to the
// buffer and the libibverbs provider pins it (runtime.Pinner) while it is
// registered, so a registered buffer is never freed and its address never
// reused for other memory: the stale registration that C registration
// caches must catch by intercepting free and munmap cannot happen. The
// cost is memory kept alive: the cache keeps at most Config.RegCacheBytes
// (256 MiB) registered, deregistering the least recently used buffers
// beyond it, Endpoint.Forget deregisters a buffer the program is done
// with, and Close deregisters everything. A buffer in use by a transfer
// is deregistered only when the transfer completes. Registered buffers
// allow remote writes and reads by the job's peers, which learn a key only
// for the buffer they are told to write.
//
// # Waiting
//
// One progress goroutine polls the completion queue. After the last
// completion it keeps polling for Config.Spin (50 µs), yielding the
// processor between polls, then arms the queue, polls once more (a
// completion between the last poll and the arming is not missed) and
// parks on the completion channel until an event, a heartbeat, or Close.
//
// # Failure
//
// A completion with an error status (retry exceeded, RNR retry exceeded,
// remote access error, a flush because a queue pair went to the error
// state), a post the provider refuses, or a completion queue that breaks
// fails the link to that peer: its queue pair is moved to the error state,
// its pending sends and receives fail with a *transport.PeerError naming
// it and wrapping transport.ErrPeerClosed and a *CompletionError, later
// ones too, and the function given to OnPeerLoss is called once with the
// rank. Because RC queue pairs notice a dead peer only when they send to
// it, every rank writes zero bytes to each peer every Config.Heartbeat
// (1 s): a vanished peer is found within a heartbeat plus the retry time,
// about (RetryCount+1) × 4.096 µs × 2^Timeout (0.5 s with the defaults),
// even while no message flows. Close sends each peer a goodbye first,
// whose receives from it then fail with ErrPeerClosed without a loss
// report, then destroys the queue pairs, so the adapter touches no user
// buffer once Close has returned.
//
// # Left out
//
// Several queue pairs per peer, inline sends, shared receive queues,
// lazy connection, and service-level or traffic-class options are not
// implemented. See README.md for what was verified where.
package ib
