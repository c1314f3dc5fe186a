//go:build cuda

package cuda_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"testing"

	"github.com/goccl/goccl/device/cuda"
	"github.com/goccl/goccl/reduceop"
)

// TestIPC exports a sub-range of a buffer, and a child process (this test
// binary again) opens it, checks its contents and writes into it.
func TestIPC(t *testing.T) {
	ctx := context.Background()
	if env := os.Getenv("GOCCL_TEST_IPC_HANDLE"); env != "" {
		ipcChild(t, env)
		return
	}
	c := open(t)
	b := newBuffer(t, c, reduceop.Uint8, 4096)
	data := make([]byte, 4096)
	for i := range data {
		data[i] = byte(i * 7)
	}
	must(t, b.CopyFromHost(ctx, 0, data))
	h, err := b.Slice(256, 4096).IPCHandle()
	if err != nil {
		t.Fatal(err)
	}
	if h.Offset != 256 || h.Len != 3840 || h.DType != reduceop.Uint8 {
		t.Fatalf("handle %+v, want offset 256, 3840 x uint8", h)
	}
	enc, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestIPC$", "-test.v")
	cmd.Env = append(os.Environ(), "GOCCL_TEST_IPC_HANDLE="+string(enc))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	got := make([]byte, 4096)
	must(t, b.CopyToHost(ctx, got, 0))
	for i := range got {
		want := data[i]
		if i >= 256 && i < 256+16 {
			want = 0xee
		}
		if got[i] != want {
			t.Fatalf("byte %d after the child wrote: %#x, want %#x", i, got[i], want)
		}
	}
}

func ipcChild(t *testing.T, env string) {
	var h cuda.IPCHandle
	if err := json.Unmarshal([]byte(env), &h); err != nil {
		t.Fatal(err)
	}
	c := open(t)
	b, err := c.OpenIPC(h)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { must(t, b.Free()) }()
	got := make([]byte, b.Len())
	must(t, b.CopyToHost(context.Background(), got, 0))
	for i := range got {
		if want := byte((i + 256) * 7); got[i] != want {
			t.Fatalf("child: byte %d is %#x, want %#x", i, got[i], want)
		}
	}
	mark := make([]byte, 16)
	for i := range mark {
		mark[i] = 0xee
	}
	must(t, b.CopyFromHost(context.Background(), 0, mark))
}
