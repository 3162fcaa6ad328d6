package procmaps

import (
	"encoding/binary"
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

// callSite is what precedes a return-address candidate in the code.
type callSite struct {
	call bool
	// direct: a direct call (arm64 BL) whose target is the candidate plus delta.
	direct bool
	delta  int64
}

// maxLeafBytes bounds how far into a leaf function its sampled pc may lie from the
// function's entry, for an arm64 link register to be taken as the leaf's return address.
const maxLeafBytes = 64 << 10

// IsLeafReturn reports whether ret, the return-address candidate of a sample whose
// frame-pointer walk may have skipped the leaf's caller, is that caller's return address.
// pc is the sampled (leaf) address and m the mapping that holds ret.
//
// A frame-pointer walk skips the caller of a function that has not set up its own frame (a
// frameless leaf, or a sample on a function's first or last instruction). On x86-64 ret is
// the word at the stack pointer, the caller's return address when it follows a call. On arm64 it
// is the link register, which also holds a return address, into the sampled function
// itself, once that function has called out: a stale value. So on arm64 the call before
// ret must be a direct BL to a function entry at most maxLeafBytes below pc (the leaf), and
// ret must not lie between that entry and pc (the sampled function's own call site). A leaf
// called through a pointer or a PLT stub keeps its caller unknown rather than risk a frame
// that was never on the stack.
func (t *Table) IsLeafReturn(pid uint32, m *Mapping, pc, ret uint64) bool {
	cs := t.callSiteOf(pid, m, ret)
	if t.arch != "arm64" {
		return cs.call
	}
	if !cs.direct {
		return false
	}
	entry := uint64(int64(ret) + cs.delta)
	if entry > pc || pc-entry >= maxLeafBytes {
		return false
	}
	return ret < entry || ret > pc
}

// callSiteOf decodes the instruction before ret, in pid's memory, for the table's architecture. The answer is
// cached per file and address, so the process's memory is read once per call site.
func (t *Table) callSiteOf(pid uint32, m *Mapping, ret uint64) callSite {
	if m == nil || ret < m.Start+8 || ret > m.End {
		return callSite{}
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
		return callSite{}
	}
	n, _ := fh.ReadAt(code[:], int64(ret-8))
	fh.Close()
	if n != len(code) {
		return callSite{}
	}
	var v callSite
	if t.arch == "arm64" {
		v = decodeARM64Call(binary.LittleEndian.Uint32(code[4:]))
	} else {
		v.call = FollowsCall(code)
	}
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

// decodeARM64Call decodes insn, the instruction before a return address, as an AArch64
// branch with link: BL (direct, its target insn's address + imm26*4), or BLR and the
// pointer-authenticating BLRAA, BLRAB, BLRAAZ, BLRABZ (indirect).
func decodeARM64Call(insn uint32) callSite {
	switch {
	case insn&0xfc000000 == 0x94000000: // BL imm26
		imm := int64(int32(insn<<6) >> 6) // sign-extend 26 bits
		return callSite{call: true, direct: true, delta: imm*4 - 4}
	case insn&0xfffffc1f == 0xd63f0000, // BLR Xn
		insn&0xfffff81f == 0xd63f081f, // BLRAAZ, BLRABZ Xn
		insn&0xfffff800 == 0xd73f0800: // BLRAA, BLRAB Xn, Xm
		return callSite{call: true}
	}
	return callSite{}
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
