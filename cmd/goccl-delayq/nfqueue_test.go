//go:build linux

package main

import (
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"
)

// The layouts against the uapi header's structs, byte by byte: a wrong
// offset here binds no queue, or accepts the wrong packets.
func TestVerdictBatchMessage(t *testing.T) {
	b := verdictBatchMessage(7, 0x0102, 0xa0b0c0d0)
	if len(b) != nfnlHdrLen+4+8 || binary.NativeEndian.Uint32(b) != uint32(len(b)) {
		t.Fatalf("length %d, header says %d", len(b), binary.NativeEndian.Uint32(b))
	}
	if typ := binary.NativeEndian.Uint16(b[4:]); typ != 3<<8|3 {
		t.Errorf("type %#x, want subsystem 3 (queue), message 3 (verdict batch)", typ)
	}
	if seq := binary.NativeEndian.Uint32(b[8:]); seq != 7 {
		t.Errorf("seq %d", seq)
	}
	if b[18] != 1 || b[19] != 2 {
		t.Errorf("res_id % x, want the queue in network order", b[18:20])
	}
	a := b[nfnlHdrLen:]
	if binary.NativeEndian.Uint16(a) != 12 || binary.NativeEndian.Uint16(a[2:]) != nfqaVerdictHdr {
		t.Errorf("attribute header % x", a[:4])
	}
	if binary.BigEndian.Uint32(a[4:]) != 1 || binary.BigEndian.Uint32(a[8:]) != 0xa0b0c0d0 {
		t.Errorf("verdict % x, want NF_ACCEPT then the id, big-endian", a[4:])
	}
}

func TestConfigMessage(t *testing.T) {
	b := configMessage(1, 5, 1000)
	var types []uint16
	a := b[nfnlHdrLen:]
	for len(a) > 0 {
		n := int(binary.NativeEndian.Uint16(a))
		types = append(types, binary.NativeEndian.Uint16(a[2:]))
		switch binary.NativeEndian.Uint16(a[2:]) {
		case nfqaCfgCmd:
			if a[4] != nfqnlCfgCmdBind {
				t.Errorf("command %d", a[4])
			}
		case nfqaCfgParams:
			if n != 4+5 || a[8] != nfqnlCopyMeta {
				t.Errorf("params % x", a[4:n])
			}
		case nfqaCfgQueueMaxlen:
			if binary.BigEndian.Uint32(a[4:]) != 1000 {
				t.Errorf("maxlen % x", a[4:8])
			}
		}
		a = a[(n+3)&^3:]
	}
	if len(types) != 5 || types[0] != nfqaCfgCmd {
		t.Errorf("attributes %v: the bind must come first", types)
	}
	if binary.NativeEndian.Uint16(b[6:])&unix.NLM_F_ACK == 0 {
		t.Error("config asks for no ack: a refused bind would go unseen")
	}
}

func TestParse(t *testing.T) {
	// A packet message: header, nfgenmsg, a mark attribute, then the
	// packet header (id 42) padded from 7 bytes to 8.
	pkt := request(nfqnlMsgPacket, 0, 0, 0)
	pkt = attr(pkt, 3, 0, 0, 0, 9)
	pkt = attr(pkt, nfqaPacketHdr|0x8000, 0, 0, 0, 42, 8, 0, 3)
	pkt = finish(pkt)
	// An error report for request 9: errno, then the request's header.
	rep := make([]byte, unix.SizeofNlMsghdr+4+unix.SizeofNlMsghdr)
	binary.NativeEndian.PutUint32(rep, uint32(len(rep)))
	binary.NativeEndian.PutUint16(rep[4:], unix.NLMSG_ERROR)
	errno := -int32(unix.EBUSY)
	binary.NativeEndian.PutUint32(rep[16:], uint32(errno))
	binary.NativeEndian.PutUint32(rep[20+8:], 9)
	var got []event
	if err := parse(append(pkt, rep...), func(ev event) { got = append(got, ev) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !got[0].packet || got[0].id != 42 || got[1].packet || got[1].seq != 9 || got[1].errno != unix.EBUSY {
		t.Fatalf("parsed %+v", got)
	}
	if err := parse(pkt[:len(pkt)-4], func(event) {}); err == nil {
		t.Error("a truncated message parsed")
	}
}
