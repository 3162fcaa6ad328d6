// Command sample writes an address file for bench/symbolize: n addresses, one hex address per
// line, each at a random offset inside a function picked uniformly from the binary's sized
// FUNC symbols (.symtab, else .dynsym). The same seed gives the same file.
package main

import (
	"bufio"
	"debug/elf"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
)

func main() {
	bin := flag.String("bin", "", "ELF binary to sample")
	n := flag.Int("n", 10000, "number of addresses")
	seed := flag.Uint64("seed", 1, "random seed")
	out := flag.String("o", "", "output file (default stdout)")
	flag.Parse()
	if err := run(*bin, *n, *seed, *out); err != nil {
		slog.Error("sample", "err", err)
		os.Exit(1)
	}
}

type fn struct{ addr, size uint64 }

func run(bin string, n int, seed uint64, out string) error {
	if bin == "" {
		return fmt.Errorf("-bin is required")
	}
	f, err := elf.Open(bin)
	if err != nil {
		return fmt.Errorf("open %s: %w", bin, err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		if syms, err = f.DynamicSymbols(); err != nil {
			return fmt.Errorf("%s: no symbol table: %w", bin, err)
		}
	}
	seen := map[uint64]bool{}
	var fns []fn
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Size == 0 || s.Section == elf.SHN_UNDEF ||
			int(s.Section) >= len(f.Sections) || seen[s.Value] {
			continue
		}
		if f.Sections[s.Section].Flags&elf.SHF_EXECINSTR == 0 {
			continue
		}
		seen[s.Value] = true
		fns = append(fns, fn{s.Value, s.Size})
	}
	if len(fns) == 0 {
		return fmt.Errorf("%s: no sized function symbols", bin)
	}
	w := os.Stdout
	if out != "" {
		if w, err = os.Create(out); err != nil {
			return fmt.Errorf("create %s: %w", out, err)
		}
	}
	bw := bufio.NewWriter(w)
	rng := rand.New(rand.NewPCG(seed, ^seed))
	for i := 0; i < n; i++ {
		fn := fns[rng.IntN(len(fns))]
		fmt.Fprintf(bw, "0x%x\n", fn.addr+rng.Uint64N(fn.size))
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write addresses: %w", err)
	}
	if out != "" {
		return w.Close()
	}
	return nil
}
