// Package shm is a transport.Endpoint for ranks that are processes on one
// host (or goroutines of one process: each Connect maps the segments
// anew). It is Linux only.
//
// # Rings and segments
//
// Each ordered pair of ranks (from, to) has a single-producer
// single-consumer ring of slots in its own segment: a file named
// SegmentName(JobID, Nonce, from, to) in Config.Dir (/dev/shm), mapped
// shared by both. Rank from creates it (O_EXCL, mode 0600), sizes and maps
// it, fills the header and stores ready last; rank to polls with backoff
// until it is there and ready, checks that it is this user's with no
// access for others, maps it, checks that the header's slot size and
// count match the file's size, writes its pid, and unlinks the file.
// So once Connect has returned on both sides nothing is left in /dev/shm,
// and a crash after that leaves nothing either (the kernel frees the
// memory with the last mapping). A Close unlinks the segments its peers
// never opened.
//
//	offset  0   +--------------------------------------------------------+
//	            | magic "gocclshm" | version | slot size | slots         |
//	            | writer pid | reader pid | ready             (line 0)   |
//	       64   | head   uint64: slots published   (writer only)         |
//	      128   | tail   uint64: slots consumed    (reader only)         |
//	      192   | dataSeq uint32, readerSleep uint32 (reader parks here) |
//	      256   | spaceSeq uint32, writerSleep uint32 (writer parks)     |
//	      320   | writerGone uint32: the writer closed (goodbye)         |
//	      384   | readerGone uint32: the reader closed                   |
//	      448   | cmaState uint64: descriptor << 3 | state   (both CAS) |
//	     4096   +--------------------------------------------------------+
//	            | slot 0: kind u32 | chunk u32 | tag u64 | total u64 | - |
//	            |         payload: SlotSize-32 bytes                     |
//	            | slot 1 ...                                             |
//	            | slot Slots-1                                           |
//	            +--------------------------------------------------------+
//
// Every index and flag sits in its own 64-byte cache line and is read and
// written with sync/atomic; slot i lives at i mod Slots. A message takes
// one slot (kind first: its tag, its total length, and up to SlotSize-32
// bytes) and as many continuation slots as its length needs, in order. A
// message that fits in the free slots is copied in by Isend itself, which
// returns a completed request (no goroutine, no allocation); a longer one
// is queued for the peer's sender goroutine, which publishes slot by slot
// as the reader frees them, so a message of any length streams through a
// ring of any size (one copy in, one copy out). Messages to oneself go
// straight to the matcher. A ring has DefaultSlots (128) slots of 8 KiB,
// 1 MiB, in a job of up to SmallJob (8) ranks, so that a message of
// 512 KiB (the halves of a 2-rank allreduce of 1 MiB) fits an empty ring
// and is copied in by Isend; a larger job's rings have half as many, so
// that its n(n-1) rings take half the memory. RingBytes says how much.
//
// # Large messages: one copy
//
// A message of Config.CMAThreshold bytes or more (DefaultCMAThreshold,
// 256 KiB; negative: never) that does not fit in the ring's free slots
// when it is sent, or that is one of a stream of such messages under one
// tag (below), takes a single slot of kind 3 holding the address of
// the sender's buffer; the receiver's drainer copies the message with
// process_vm_readv (Linux cross-memory attach) straight from the sender's
// memory into the posted receive (or into a pooled buffer when none is
// posted yet), then ends the descriptor in cmaState (below), waking the
// sender, whose send completes only then. Isend writes that slot itself
// when nothing is queued before the message, so that the receiver can
// pull at once; the sender goroutine only waits for cmaState (left to it,
// the slot waited until the caller let go of the processor, a long wait
// for a rank bound to one core). The first such message from a
// peer is preceded by a one-byte probe read: where the kernel refuses
// (EPERM under a strict ptrace scope or in some containers), the receiver
// ends the descriptor refused, and the sender sends that message and every
// later one to that receiver by copy through the ring.
// Endpoint.LargePath(peer) says which path the next large message to a
// peer takes ("cma" or "copy") and Endpoint.Stats counts the messages
// that went each way (CMASends, CMARecvs, CopySends, CMARefused): to tell
// which path ran, read them after a transfer.
//
// # Revoking a descriptor
//
// A published descriptor lends the reader the sender's buffer, and a
// sender must never wait on a reader that does not run (a stopped
// process keeps its mappings and its pid: nothing tells the sender it is
// gone). So each descriptor has a state, in the ring's cmaState word:
// its number k (the writer's count of descriptors, which the reader
// counts too, in ring order) shifted left 3, or'ed with
//
//	published (1)  stored by the writer, before the head that shows the slot
//	pulling   (2)  reader: CAS from published, before it reads a byte
//	pulled    (3)  reader: CAS from pulling, after process_vm_readv
//	refused   (4)  reader: CAS from pulling, the kernel refused the probe
//	revoked   (5)  writer: CAS from published or pulling, when it gives up
//
// The invariant: the reader uses bytes of the writer's buffer only if it
// moved k from pulling to pulled itself, and the writer hands the buffer
// back to its caller only once k is pulled, refused or revoked by it.
// Each side learns from its CAS whether it won. A writer gives up only
// when it cannot wait any longer: its endpoint closes (goccl closes it
// on abort, after a timeout) or its link to the reader failed; then it
// revokes instead of waiting (cmaRevoke), and returns at once whether it
// wins or the reader had already ended the pull, so neither a send nor
// Close waits on a stopped reader. The writer wins over a pull in
// progress too: waiting for it would be unbounded if the reader was
// stopped between its two CASes, and a stopped process has always
// finished its process_vm_readv (a stop takes effect on the way back to
// user space), so the reader reads at most the bytes of a buffer the
// writer's caller may be reusing, and drops them when its final CAS
// fails. A reader that finds k revoked, at its claim or at its end,
// leaves the posted receive alone or fails it, and stops reading the
// ring with errRevoked: receives from that peer fail with ErrPeerClosed
// as after a goodbye (the writer is closing; no loss is reported). A
// word that is neither published(k) at the claim nor revoked(k) is a
// protocol error. The common path costs one atomic store at the writer
// and two CASes at the reader (which stored twice before) per large
// message; small messages do not touch the word. TestRevokeBeforePull,
// TestPullBeforeRevoke, TestRevokeDuringPull and TestRevokeRace drive
// both sides of one ring directly.
//
// Since each large message costs a hand-off and a pull that pins its
// pages, the Endpoint asks the pipelined algorithms for segments of
// PullSegmentBytes (4 MiB) rather than their 256 KiB
// (transport.SegmentHinter), where CMA is configured.
//
// A message that fits in the free slots is copied in by Isend whatever
// its size. A pull pins the sender's pages on every call; two plain copies
// of a message the ring holds, the first in the caller's cache and with no
// hand-off to a goroutine, cost less: a 2-rank allreduce of 1 MiB (its
// messages are 256 and 512 KiB) through rings that hold them ran at
// 14.8 GB/s so, against 9.7 by CMA (BENCHMARKS.md, "Same host"). What CMA
// saves is the second copy of a message that would have to stream
// through the ring while its reader frees slots, the large ones, and of a
// stream of large messages under one tag: a collective's messages share
// its tag, and a large one streams its data in segments (a 2-rank ring
// allreduce of 64 MiB sends 256 KiB segments, over a hundred under one
// tag) whose data is no longer in cache. So only the first copyFirst (4)
// large messages under a tag are copied in when they fit; the rest of
// the stream goes by CMA. That took 64 MiB from 3.77 to 4.17 GB/s and
// left 1 MiB (two large messages a call) as it was.
//
// One drainer goroutine per peer reads its ring and hands each message to
// the transport.Matcher: into the posted receive when there is one
// (Claim, then straight from the slots into the user's buffer), else into
// a pooled buffer in the unexpected queue. It never waits for a receive to
// be posted, so a message nobody receives yet does not hold up others.
//
// # Waiting
//
// A goroutine waiting for data (the drainer) or for space (a sender)
// polls the ring for Config.Spin (DefaultSpin; negative: not at all),
// yielding the processor every few polls so that the goroutines it woke
// can run, then parks on a futex word in the segment: it reads the word,
// sets its sleep flag, checks the ring again, and calls FUTEX_WAIT with
// the value it read. The other side publishes (head or tail) and then, if
// the sleep flag is set, increments the word and calls FUTEX_WAKE. With
// sequentially consistent atomics either the waiter sees the new index or
// the publisher sees the flag, and a wake between the read of the word and
// FUTEX_WAIT makes FUTEX_WAIT return at once, so no wake-up is lost. An
// idle rank's goroutines sleep in the kernel (a FUTEX_WAIT times out after
// a second as a safety net only). A goroutine waiting on a receive polls
// its request for Config.Spin as well (transport.Spinner, which stops
// spinning for a while when it does not pay) before it parks on a channel.
//
// With Config.Help (the rendezvous sets it for a job of one host, and
// for a rank of one P whose ranks outnumber cores beside TCP links) a
// goroutine waiting on a receive takes the
// peer's messages off the ring itself, under the drainer's mutex, while
// the drainer stands back: it sleeps on a channel for at most a
// millisecond while any caller helps, and takes the rest (a message still
// being written, a pulled one, the end of the link), which the helper
// wakes it for. With a core a rank the helper takes any message whose
// slots are all published, and gives up the processor only when the
// drainer has the ring or every 64 polls; where ranks outnumber cores it
// takes one-slot messages and yields between polls. A message then
// reaches its caller without a hand-off between goroutines, and a rank
// has one thread polling instead of two. With Config.StandBack (the
// second case) the drainer does not poll even while no caller helps: it
// sleeps until a helper wakes it, or for the millisecond (up to 16 while
// no caller waits on the peer and none has given up waiting), never in a
// futex, whose system call would hold the rank's one P; the helper then
// takes whole messages of any length. Close takes the mutex
// before it unmaps the rings, so a helper is out of them.
//
// No message of up to a ring's free slots allocates: the send is copied
// in by Isend and returns a shared completed request, and a receive comes
// from the matcher's free list once its owner releases the previous one
// (transport.Release; BenchmarkSendRecv8B shows 0 allocs/op). A wait that
// outlasts the spin makes a channel to park on.
//
// # Failure
//
// Each segment holds its writer's pid. Connect opens a pidfd for each peer
// (pidfd_open; kill(pid, 0) every 100 ms where pidfds are refused) and one
// monitor goroutine polls them: when a peer's process exits its drainer is
// woken, delivers what the peer had published, fails the receives pending
// from it with a transport.PeerError wrapping transport.ErrPeerClosed, and
// the loss is reported to the function given to OnPeerLoss; sends to it
// fail too. This happens whether or not anyone waits on the peer. Close
// sets writerGone in the rings it writes (a goodbye: the peer's receives
// fail with ErrPeerClosed but no loss is reported) and readerGone in those
// it reads (the peer's sends fail).
//
// A peer is never trusted with an index or a length: the segment header is
// checked against the file size once, the head index must lie within
// Slots of the tail, and each slot header is checked by parseSlot (fuzzed
// by FuzzSlotHeader) before any payload byte is read. A violation fails
// the peer's receives with an error wrapping transport.ErrProtocol that
// names it, and stops reading its ring.
//
// # Boards
//
// The Endpoint is a transport.Boarder: Board(id, ranks, size) maps one
// segment per group, shared by all its members (not one per pair), on
// which goccl runs allreduces of up to 1 KiB and barriers (see the root
// package's board.go) without a message. Its file is
// BoardName(JobID, Nonce, id, ranks, size) in Config.Dir; the name
// carries a hash of the members and the size, so that a member asking
// for another group is not handed this one.
//
//	offset  0  | magic "gocclbrd" | version | members | block size |
//	           | group key (FNV-1a of id, ranks, size) | creator pid |
//	           | ready                                    (line 0)   |
//	       64  | mapped uint32: members that have mapped it          |
//	      128  | seq uint32: the futex word waiters park on          |
//	      192  | sleepers uint32: members parked or about to park    |
//	      256  +-----------------------------------------------------+
//	           | the block: size bytes, Bytes(), 64-byte aligned     |
//
// The first member to come creates the file (O_EXCL, mode 0600), sizes
// and maps it, fills the header and stores ready last; a member that
// finds the file there polls with backoff until it is ready (at most
// BoardTimeout, then Board fails and the caller does without a board),
// checks that it is this user's with no access for others, that its size
// is the header plus the block and that the header names the same group,
// and maps it. So no member ever waits for another to reach Board (goccl
// asks at communicator creation, and the members of a group may create
// it at different times), only for a creator that is in the middle of a
// few system calls. Each member then increments mapped; the one that
// makes it the group's size unlinks the file, so once every member has
// its board nothing is left in Dir, and a crash after that leaves
// nothing either. A Close (the board's last handle in this endpoint, or
// the endpoint's) before every member mapped it unlinks it.
//
// Wait polls for the endpoint's spin (transport.Spinner) and then parks
// as a ring's reader does: it increments sleepers, reads seq, looks once
// more and FUTEX_WAITs with the value read; Wake, after the member's
// writes, loads sleepers and only if it is not zero increments seq and
// FUTEX_WAKEs (one load when nobody parks). Either the waker sees the
// sleeper or the sleeper sees the write, and a bump after the read makes
// FUTEX_WAIT return at once: no wake-up is lost (TestBoardWakeups parks
// thousands of times with the safety net off). ctx's end (context.AfterFunc),
// the loss of a peer (the pidfd monitor, or a goodbye or protocol error
// seen by a drainer), a board's Close and the endpoint's Close bump seq
// too, and a FUTEX_WAIT times out after a second as a safety net. Lost(m)
// is what the endpoint knows of member m: its process exited, it closed
// its endpoint, or its ring broke the protocol (a *transport.PeerError
// wrapping transport.ErrPeerClosed). A member killed while parked leaves
// sleepers above zero: the others then make a FUTEX_WAKE per Wake, which
// costs time, never correctness.
//
// The header is checked once, at mapping; later the transport reads only
// seq, sleepers and mapped, whose values index nothing. What goes where
// in the block is the communicator's business.
//
// # Left to do
//
// A rank that dies between creating its segments and its peers mapping
// them leaves those files behind (a later job uses another Nonce); so
// does a board whose creator died before every member mapped it.
// goccl.Init uses it between ranks on one host (transport/route).
package shm
