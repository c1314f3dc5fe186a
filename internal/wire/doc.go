// Package wire holds the byte layouts goccl's ranks exchange besides the
// payloads: the tags that name a message's stream, the fingerprint that
// the first message of a call carries, the abort notice a rank sends when
// it gives up, the wait notice of a stalled rank, and the header of a
// point-to-point message. Each has a constructor, an encoding, a parser
// and a String, and nothing else: the rules that act on them (who is
// blamed, which call is behind) live with the communicator, which uses
// this package to read and write the bytes.
//
// Every multi-byte field is little-endian. The layouts, byte offsets first:
//
// Tag (64 bits): the group id in the top 24 bits, then a bit that says
// point-to-point, then 39 bits that count the group's collectives (or
// carry the user's point-to-point tag). Group all ones is reserved for
// the notices.
//
//	63        40   39    38                    0
//	| group id | p2p | sequence number or tag |
//
// Fingerprint (32 bytes), the first bytes of a call's first message from
// one rank to another:
//
//	0    2    3       4       5       6     7        8      12           16      24    32
//	| GF | op | dtype | redop | chunk | seg | layout | root | group id lo | count | seq |
//
// op numbers commslog's op names from 1; chunk is log2 of the message
// size a device buffer is cut into (0: host memory, whole messages); seg
// log2 of the segment size the group's pipelined algorithms use (0: their
// default); layout a coalesced call's hash of its buffers' lengths (0: one
// buffer), so that ranks whose lists differ but add up alike disagree;
// root is -1 for a call without one. Two other kinds share the
// layout of the group and sequence fields: "GS" (a stray message: one
// that arrived for a call its receiver had finished) and "GL" (a rank
// that left: it closed its communicator after count... seq calls).
//
// Abort notice (80 bytes), on the reserved abort tag:
//
//	0         8       9   12        16                  48                  80
//	| culprit | class | - | witness | witness's call FP | culprit's call FP |
//
// A leave notice is an abort notice of class Left with the number of
// world calls the sender made in bytes 16..24.
//
// Wait notice (8 bytes), on the reserved wait tag: the world rank the
// sender timed out waiting on.
//
// Point-to-point header (16 bytes), in front of a small payload or as a
// message of its own before a large one:
//
//	0    2       3   8       16
//	| GP | dtype | - | count |
package wire
