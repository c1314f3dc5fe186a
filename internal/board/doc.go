// Package board implements the board's slot protocol: small collectives
// in shared memory. Where every member of a group shares memory with
// every other (goroutines over transport/mem, processes of one host over
// transport/shm), the transport offers a block that all of them map
// (transport.Board), and goccl runs allreduces of up to Max bytes and
// barriers on it instead of over messages: each member writes its
// contribution, with its call's fingerprint, into a slot of its own,
// publishes it by storing the call's sequence number, and reads every
// other member's slot straight from the block. There is no message, no
// matching, no copy into a queue, and no wake-up while the members keep
// pace; an 8-byte allreduce on two members costs a few cache-line
// transfers. NCCL's LL protocol and Open MPI's shared-memory collectives
// do the same.
//
// The package knows nothing of communicators: a Board is one member's
// side of one group's block, and a Call is what one call of that member
// brings (its sequence number, its previous call in the same row, its
// fingerprint). The fingerprint is opaque bytes here: the board writes it
// beside the payload, compares it with the peers' and reports both in a
// *MismatchError; the caller says what they mean. The caller (goccl's
// board.go) decides which calls run on the board, announces the others,
// and turns this package's errors (*MismatchError, *LengthError,
// *WaitError) into its own.
//
// Every member reduces the slots in member order, 0 first, so that every
// member holds the same bits. Picture for 4 members, call #9 (odd: slot
// row 1):
//
//	row 1:  [m0 #9 | a0]  [m1 #9 | a1]  [m2 #9 | a2]  [m3 #9 | a3]
//	each member:  buf = a0 + a1 + a2 + a3, then acks row 1 up to #9
//
// Cost: one write of m bytes and n-1 reads of m bytes per member, and the
// reduction of n slots: α_mem + n·m·(β_mem + γ), α_mem being a cache-line
// transfer (tens of nanoseconds), against ⌈log2 n⌉ message rounds.
//
// Layout, for n members (each slot and each ack line starts a 64-byte
// line; Size gives the total):
//
//	announce  n × 8 lines: member m's entry e = seq mod 8 holds the seq
//	          and fingerprint of its call seq, written only for calls that
//	          do not run on the board (Announce)
//	acks      n lines: member m's last call read in row 0, in row 1
//	slots     2 rows × n slots; member m's slot in row seq mod 2:
//	            seq u64 | len u16, ack u48 | fingerprint [32] | payload (Max)
//
// A payload of up to 16 bytes shares the slot's first line with its
// sequence number and fingerprint, so a reader of an 8-byte allreduce
// pulls one line per peer, and the writer one ack line per peer.
//
// Invariants, on which the memory ordering rests:
//
//   - Publication. A member writes its slot's length, ack, fingerprint
//     and payload with plain stores, then stores the call's sequence
//     number atomically; a reader loads the sequence number atomically
//     and only then reads the rest. A reader never reads a slot whose
//     sequence number is not its call's.
//   - Reuse after every ack. A member writes its slot in row p for call s
//     only once its previous board call in that row, prev, is written and
//     every member has acked it (its ack for row p is prev or later: a
//     member reads a row's calls in order, since it cannot finish a later
//     one before every slot of the earlier one was rewritten). The ack is
//     stored after the reads of the slots, so the rewrite happens after
//     them. While members keep pace this holds on arrival (a member
//     reaches call s+2 only after reading everyone's call s+1, which they
//     wrote after reading call s); async calls and calls from several
//     goroutines wait for it (Call.Prev).
//   - Acks learnt from slots. The writer's test would read every member's
//     ack line, which that member rewrote in its last call: a cache miss
//     per member before the slot is written, on every call. So a slot also
//     carries its writer's ack of the other row, as it was when the slot
//     was written (ack above): the reader of call s+1 learns there that
//     its peer has read call s, which is what its call s+2 will ask, and
//     reads an ack line only where a member's slots have not said enough
//     (BENCHMARKS.md). What is learnt is never more than the member's
//     ack, since acks only grow.
//   - Own slot. A member acks only a call it has posted, so its own ack
//     also says that its slot holds prev; the test does not read the slot
//     to see (free).
//
// Mismatches. A slot carries its call's fingerprint, and the reader
// compares it with its own, as for a first message (*MismatchError). A
// member whose call does not run on the board (another count, another
// collective) leaves its slot alone and announces the call instead; a
// member waiting for its slot at call s that finds the announcement of s
// fails at once with a *MismatchError naming it (Announced). A slot of
// another length is a *LengthError. A lost member (its endpoint closed),
// the caller's abort (Hooks.Aborted), the end of the context and the
// close of this member's board end every wait (*WaitError).
//
// Time. Everything between the previous call's end and the store that
// publishes this one is the call's time, at any rate on the members the
// others wait for; what follows the store runs while the peers' slots
// are on their way, except on the last member to arrive, which finds them
// there. So the board reads no clock on a call that does not wait: it
// stamps the call's start (Call.Started, internal/clock) once it has
// published, and tells the caller before any wait (Hooks.Waiting), so
// that the caller starts its context's clock only then.
package board
