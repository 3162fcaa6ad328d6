//go:build linux

package unwind

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// readOwnVdso copies this process's [vdso] image: the kernel maps the same image into
// every process.
func readOwnVdso() ([]byte, error) {
	fh, err := os.Open("/proc/self/maps")
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasSuffix(line, "[vdso]") {
			continue
		}
		lo, rest, _ := strings.Cut(line, "-")
		hi, _, _ := strings.Cut(rest, " ")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start || end-start > 1<<20 {
			return nil, fmt.Errorf("malformed [vdso] line %q", line)
		}
		mem, err := os.Open("/proc/self/mem")
		if err != nil {
			return nil, err
		}
		defer mem.Close()
		b := make([]byte, end-start)
		if _, err := mem.ReadAt(b, int64(start)); err != nil {
			return nil, fmt.Errorf("read [vdso]: %w", err)
		}
		return b, nil
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("no [vdso] in /proc/self/maps")
}
