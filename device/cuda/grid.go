package cuda

import "github.com/goccl/goccl/kernels"

// gridSize returns the number of blocks of kernels.BlockSize threads to
// launch for items work items (one per thread) on a device with sms
// multiprocessors, each holding at most active blocks of the kernel at
// once (the driver's occupancy answer for that kernel): enough blocks to
// cover the items, but no more than fill the device in one wave, since the
// kernels loop over what is left (grid-stride loops). It is at least 1; an
// active count below 1 counts as 1.
func gridSize(items, sms, active int) int {
	blocks := items/kernels.BlockSize + min(1, items%kernels.BlockSize)
	return max(1, min(blocks, max(1, sms)*max(1, active)))
}
