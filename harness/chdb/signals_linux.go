package chdb

import (
	"fmt"
	"syscall"
	"unsafe"
)

// guardedSignals are the signals whose handlers the Go runtime needs and the
// engine's start-up has been seen to replace: faults the runtime turns into
// panics, SIGABRT, and SIGURG, which drives goroutine preemption.
var guardedSignals = []syscall.Signal{
	syscall.SIGILL, syscall.SIGABRT, syscall.SIGBUS,
	syscall.SIGFPE, syscall.SIGSEGV, syscall.SIGURG,
}

// kernelSigaction is room for the kernel's struct sigaction, which is at
// most 32 bytes on the architectures Go supports on Linux; it is saved and
// restored as opaque bytes.
type kernelSigaction [64]byte

// sigsetSize is the kernel's sigset_t size on Linux (64 signals).
const sigsetSize = 8

// preserveSignals saves the current dispositions of guardedSignals and
// returns a function that puts them back. It talks to the kernel directly
// (rt_sigaction), as the Go runtime does, so what is restored is exactly
// what the runtime installed, restorer included.
func preserveSignals() (restore func() error, err error) {
	saved := make([]kernelSigaction, len(guardedSignals))
	for i, sig := range guardedSignals {
		if _, _, errno := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), 0, uintptr(unsafe.Pointer(&saved[i])), sigsetSize, 0, 0); errno != 0 {
			return nil, fmt.Errorf("save handler of %v: %w", sig, errno)
		}
	}
	return func() error {
		for i, sig := range guardedSignals {
			if _, _, errno := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&saved[i])), 0, sigsetSize, 0, 0); errno != 0 {
				return fmt.Errorf("restore handler of %v: %w", sig, errno)
			}
		}
		return nil
	}, nil
}
