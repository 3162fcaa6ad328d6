package unwind

import (
	"debug/elf"
	"runtime"
)

// hostMachine is the ELF machine of the processes the collector unwinds: its own.
var hostMachine = machineOf(runtime.GOARCH)

func machineOf(goarch string) elf.Machine {
	switch goarch {
	case "amd64":
		return elf.EM_X86_64
	case "arm64":
		return elf.EM_AARCH64
	}
	return elf.EM_NONE
}
