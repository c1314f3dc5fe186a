package store

import (
	"bufio"
	"bytes"
	"testing"
)

// FuzzDecodeMsg feeds arbitrary frame bodies to the decoder: it must never
// panic, and whatever it accepts must encode back to the same bytes.
// The seed corpus lives in testdata/fuzz/FuzzDecodeMsg.
func FuzzDecodeMsg(f *testing.F) {
	f.Add(frameBody(&msg{op: opSet, id: 1, args: [][]byte{[]byte("key"), []byte("value")}}))
	f.Add(frameBody(&msg{op: opWait, id: 2, args: [][]byte{[]byte("a"), []byte("b"), {}}}))
	f.Add(frameBody(&msg{op: opOK, id: 3}))
	f.Add([]byte{byte(opGet), 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := decodeMsg(body)
		if err != nil {
			return
		}
		if got := frameBody(&m); !bytes.Equal(got, body) {
			t.Fatalf("decode/encode round trip changed the frame:\n in  %x\n out %x", body, got)
		}
		// The same bytes behind a length prefix read back through readMsg.
		framed := appendMsg(nil, &m)
		m2, err := readMsg(bufio.NewReader(bytes.NewReader(framed)), len(framed))
		if err != nil {
			t.Fatalf("readMsg refused what decodeMsg accepted: %v", err)
		}
		if m2.op != m.op || m2.id != m.id || len(m2.args) != len(m.args) {
			t.Fatalf("readMsg = %+v, decodeMsg = %+v", m2, m)
		}
	})
}

// frameBody is a frame without its length prefix.
func frameBody(m *msg) []byte { return appendMsg(nil, m)[4:] }

func TestReadMsgLimit(t *testing.T) {
	framed := appendMsg(nil, &msg{op: opSet, id: 9, args: [][]byte{[]byte("k"), make([]byte, 100)}})
	if _, err := readMsg(bufio.NewReader(bytes.NewReader(framed)), 50); err == nil {
		t.Fatal("readMsg accepted a frame over its limit")
	}
	if _, err := readMsg(bufio.NewReader(bytes.NewReader(framed[:len(framed)-1])), 1000); err == nil {
		t.Fatal("readMsg accepted a truncated frame")
	}
}
