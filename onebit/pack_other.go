//go:build !amd64 || purego

package onebit

const haveAVX = false

func packAVX(dst *uint8, src *float32, n int) { panic("onebit: packAVX without AVX") }
