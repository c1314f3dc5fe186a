//go:build !unix

package store

import (
	"errors"
	"os"
)

func lockFile(f *os.File, exclusive bool) error {
	return errors.ErrUnsupported
}

func unlockFile(f *os.File) error { return errors.ErrUnsupported }
