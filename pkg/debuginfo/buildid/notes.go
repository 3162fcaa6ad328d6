package buildid

import (
	"encoding/binary"
	"encoding/hex"
)

// ForEachNote walks a stream of ELF notes as the kernel exposes them outside an ELF file
// (/sys/kernel/notes, /sys/module/<name>/notes/*, a PT_NOTE segment of /proc/kcore): namesz,
// descsz and type, then name and desc, each padded to align (4, or 8). The name is given
// without its terminating NULs. It stops at the first malformed note.
func ForEachNote(data []byte, bo binary.ByteOrder, align uint64, fn func(name string, typ uint32, desc []byte)) {
	forEachNote(data, bo, align, fn)
}

// GNUFromNotes returns the GNU build ID (lower-case hex) of a note stream in the machine's
// own byte order (what the kernel writes), or "" when it holds none.
func GNUFromNotes(data []byte, bo binary.ByteOrder) string {
	id := ""
	forEachNote(data, bo, 4, func(name string, typ uint32, desc []byte) {
		if id == "" && name == "GNU" && typ == ntGNUBuildID && len(desc) > 0 && len(desc) <= maxGNUDesc {
			id = hex.EncodeToString(desc)
		}
	})
	return id
}
