package procmaps

import (
	"os"
	"path/filepath"
	"strconv"
)

// maxCallSites bounds the cache of return-address checks; it is cleared when full.
const maxCallSites = 1 << 16

type callSiteKey struct {
	file FileKey
	addr uint64 // ELF virtual address
}

// IsReturnAddress reports whether ret, a word read at pid's user stack pointer and lying in
// mapping m, is a return address: the bytes before it in the process's code are an x86-64
// near call. A frame-pointer walk skips the caller of a function that has not set up its
// own frame (a frameless leaf, or a sample on a function's first or last instruction); the
// word at the stack pointer then is that caller's return address. The answer is cached per
// file and address, so the process's memory is read once per call site.
func (t *Table) IsReturnAddress(pid uint32, m *Mapping, ret uint64) bool {
	if m == nil || ret < m.Start+8 || ret > m.End {
		return false
	}
	key := callSiteKey{addr: m.ELFAddress(ret)}
	cacheable := m.File != nil
	if cacheable {
		key.file = m.File.Key
		t.mu.Lock()
		v, ok := t.callSites[key]
		t.mu.Unlock()
		if ok {
			return v
		}
	}
	var code [8]byte
	fh, err := os.Open(filepath.Join(t.procRoot, strconv.FormatUint(uint64(pid), 10), "mem"))
	if err != nil {
		return false
	}
	n, _ := fh.ReadAt(code[:], int64(ret-8))
	fh.Close()
	if n != len(code) {
		return false
	}
	v := FollowsCall(code)
	if cacheable {
		t.mu.Lock()
		if len(t.callSites) >= maxCallSites {
			clear(t.callSites)
		}
		t.callSites[key] = v
		t.mu.Unlock()
	}
	return v
}

// FollowsCall reports whether the 8 bytes before an address end with an x86-64 near call:
// E8 rel32, or FF /2 with any ModRM/SIB/displacement form (a REX prefix before FF does not
// change where the instruction ends).
func FollowsCall(code [8]byte) bool {
	if code[3] == 0xe8 {
		return true
	}
	for i := 1; i <= 6; i++ { // FF at code[i]: the instruction is 8-i bytes long
		if code[i] != 0xff {
			continue
		}
		modrm := code[i+1]
		if (modrm>>3)&7 != 2 {
			continue
		}
		var sib byte
		if i+2 < len(code) {
			sib = code[i+2]
		}
		if 1+modrmLen(modrm, sib) == 8-i {
			return true
		}
	}
	return false
}

// modrmLen is the length of a ModRM byte with its SIB byte and displacement.
func modrmLen(modrm, sib byte) int {
	mod, rm := modrm>>6, modrm&7
	switch mod {
	case 3:
		return 1
	case 0:
		switch {
		case rm == 5:
			return 5 // RIP-relative disp32
		case rm == 4 && sib&7 == 5:
			return 6 // SIB with disp32 and no base
		case rm == 4:
			return 2
		}
		return 1
	case 1:
		if rm == 4 {
			return 3
		}
		return 2
	default:
		if rm == 4 {
			return 6
		}
		return 5
	}
}
