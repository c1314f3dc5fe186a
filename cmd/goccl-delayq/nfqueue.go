//go:build linux

package main

import (
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Message and attribute numbers of netfilter's queue over netlink
// (nfnetlink_queue), as the kernel's uapi header
// linux/netfilter/nfnetlink_queue.h numbers them; x/sys/unix has the
// netlink basics and the subsystem number but not these.
const (
	nfqnlMsgPacket       = 0 // kernel to us: a packet was queued
	nfqnlMsgConfig       = 2 // us to kernel: bind a queue, set its parameters
	nfqnlMsgVerdictBatch = 3 // us to kernel: one verdict for every id up to one

	nfqaPacketHdr  = 1 // in a packet message: {id be32, hw_protocol be16, hook u8}
	nfqaVerdictHdr = 2 // in a verdict: {verdict be32, id be32}

	nfqaCfgCmd         = 1 // {command u8, pad u8, pf be16}
	nfqaCfgParams      = 2 // {copy_range be32, copy_mode u8}
	nfqaCfgQueueMaxlen = 3 // be32
	nfqaCfgMask        = 4 // be32: which flags the next attribute sets
	nfqaCfgFlags       = 5 // be32

	nfqnlCfgCmdBind = 1
	nfqnlCopyMeta   = 1 // the packet's metadata only, never its bytes

	// nfqaCfgFGSO queues a GSO packet whole. Without it the kernel cuts
	// each up to 64 KiB TCP send into MTU-sized packets before queueing,
	// which would multiply the messages (and this program's cost) by up
	// to 45 on a bulk stream, and the segments would leave as separate
	// packets rather than as the one the stack handed the link.
	nfqaCfgFGSO = 1 << 2

	nfAccept = 1 // NF_ACCEPT, linux/netfilter.h

	nlaTypeMask = 0x3fff // an attribute's type without the nested and byte-order bits

	nfnlHdrLen = unix.SizeofNlMsghdr + 4 // netlink header + struct nfgenmsg
)

// request starts a netfilter-queue message of the given kind for queue:
// the netlink header (its length set by finish) and the nfgenmsg header,
// whose res_id names the queue in network order.
func request(kind uint8, flags uint16, seq uint32, queue uint16) []byte {
	b := make([]byte, nfnlHdrLen, 64)
	binary.NativeEndian.PutUint16(b[4:], uint16(unix.NFNL_SUBSYS_QUEUE)<<8|uint16(kind))
	binary.NativeEndian.PutUint16(b[6:], flags)
	binary.NativeEndian.PutUint32(b[8:], seq)
	b[16] = unix.AF_UNSPEC
	b[17] = unix.NFNETLINK_V0
	binary.BigEndian.PutUint16(b[18:], queue)
	return b
}

// attr appends a netlink attribute, padded to 4 bytes as netlink aligns them.
func attr(b []byte, typ uint16, payload ...byte) []byte {
	b = binary.NativeEndian.AppendUint16(b, uint16(unix.SizeofNlAttr+len(payload)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, payload...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

// finish writes the message's length into its header.
func finish(b []byte) []byte {
	binary.NativeEndian.PutUint32(b, uint32(len(b)))
	return b
}

// configMessage binds queue to the sending socket and sets it up in one
// message: the kernel applies the command before the parameters, so no
// packet is queued under the defaults between the two.
func configMessage(seq uint32, queue uint16, maxlen uint32) []byte {
	b := request(nfqnlMsgConfig, unix.NLM_F_REQUEST|unix.NLM_F_ACK, seq, queue)
	b = attr(b, nfqaCfgCmd, nfqnlCfgCmdBind, 0, 0, 0)
	b = attr(b, nfqaCfgParams, append(be32(0), nfqnlCopyMeta)...)
	b = attr(b, nfqaCfgQueueMaxlen, be32(maxlen)...)
	b = attr(b, nfqaCfgMask, be32(nfqaCfgFGSO)...)
	b = attr(b, nfqaCfgFlags, be32(nfqaCfgFGSO)...)
	return finish(b)
}

// verdictBatchMessage accepts every packet of queue whose id is at most
// id. Ids rise in the order packets are queued, so this releases the
// oldest packets up to id in one message, in the order they came.
func verdictBatchMessage(seq uint32, queue uint16, id uint32) []byte {
	b := request(nfqnlMsgVerdictBatch, unix.NLM_F_REQUEST, seq, queue)
	b = attr(b, nfqaVerdictHdr, append(be32(nfAccept), be32(id)...)...)
	return finish(b)
}

// event is one netlink message as the holder needs it: a queued
// packet's id, or an error report (ack when errno is 0) for request seq.
type event struct {
	packet bool
	id     uint32
	seq    uint32
	errno  unix.Errno
	ack    bool
}

var errShort = errors.New("truncated netlink message")

// parse splits a datagram from the kernel into its messages and calls f
// on each queued packet and each error report; other messages are skipped.
func parse(buf []byte, f func(event)) error {
	for len(buf) >= unix.SizeofNlMsghdr {
		n := int(binary.NativeEndian.Uint32(buf))
		if n < unix.SizeofNlMsghdr || n > len(buf) {
			return fmt.Errorf("netlink message of %d bytes in %d: %w", n, len(buf), errShort)
		}
		typ := binary.NativeEndian.Uint16(buf[4:])
		seq := binary.NativeEndian.Uint32(buf[8:])
		body := buf[unix.SizeofNlMsghdr:n]
		switch {
		case typ == unix.NLMSG_ERROR:
			if len(body) < 4 {
				return fmt.Errorf("netlink error report: %w", errShort)
			}
			// The original request's header follows the error; its
			// sequence number says which request this answers.
			e := int32(binary.NativeEndian.Uint32(body))
			ev := event{seq: seq, ack: true, errno: unix.Errno(-e)}
			if len(body) >= 4+unix.SizeofNlMsghdr {
				ev.seq = binary.NativeEndian.Uint32(body[4+8:])
			}
			f(ev)
		case typ == uint16(unix.NFNL_SUBSYS_QUEUE)<<8|nfqnlMsgPacket:
			id, err := packetID(body)
			if err != nil {
				return err
			}
			f(event{packet: true, id: id})
		}
		n = (n + 3) &^ 3
		if n > len(buf) {
			break
		}
		buf = buf[n:]
	}
	return nil
}

// packetID finds NFQA_PACKET_HDR in a packet message's body (after
// nfgenmsg) and returns the packet's id.
func packetID(body []byte) (uint32, error) {
	if len(body) < 4 {
		return 0, fmt.Errorf("queued packet: %w", errShort)
	}
	a := body[4:]
	for len(a) >= unix.SizeofNlAttr {
		n := int(binary.NativeEndian.Uint16(a))
		typ := binary.NativeEndian.Uint16(a[2:]) & nlaTypeMask
		if n < unix.SizeofNlAttr || n > len(a) {
			return 0, fmt.Errorf("queued packet's attribute of %d bytes in %d: %w", n, len(a), errShort)
		}
		if typ == nfqaPacketHdr {
			if n < unix.SizeofNlAttr+4 {
				return 0, fmt.Errorf("queued packet's header: %w", errShort)
			}
			return binary.BigEndian.Uint32(a[unix.SizeofNlAttr:]), nil
		}
		n = (n + 3) &^ 3
		if n > len(a) {
			break
		}
		a = a[n:]
	}
	return 0, errors.New("queued packet without NFQA_PACKET_HDR")
}
