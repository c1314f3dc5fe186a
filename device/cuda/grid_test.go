package cuda

import (
	"testing"

	"github.com/goccl/goccl/kernels"
)

func TestGridSize(t *testing.T) {
	const bs = kernels.BlockSize
	tests := []struct {
		items, sms, active, want int
	}{
		{0, 80, 8, 1},
		{1, 80, 8, 1},
		{bs, 80, 8, 1},
		{bs + 1, 80, 8, 2},
		{80 * 8 * bs, 80, 8, 640},
		{80*8*bs + 1, 80, 8, 640}, // one full wave; the kernel loops
		{1 << 30, 132, 4, 528},    // a kernel the driver fits 4 of per SM
		{1 << 30, 132, 16, 2112},  // and one it fits 16 of: not capped at 8
		{1 << 30, 108, 0, 108},    // an occupancy of 0 counts as 1
		{5 * bs, 0, 0, 1},         // nonsense device numbers still give a grid
		{3*bs - 1, 1, 2, 2},
	}
	for _, tt := range tests {
		if got := gridSize(tt.items, tt.sms, tt.active); got != tt.want {
			t.Errorf("gridSize(%d, %d, %d) = %d, want %d", tt.items, tt.sms, tt.active, got, tt.want)
		}
	}
}
