package kernels

//go:generate sh gen.sh
