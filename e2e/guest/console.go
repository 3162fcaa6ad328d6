package guest

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// LinePrefix starts every line the guest's /init writes for the host; anything else on the
// console (kernel messages, the collector's log) is left alone.
const LinePrefix = "@@e2e "

// Guest is what a run of the guest reported over the serial console.
type Guest struct {
	Kernel string           // "6.1.0-56-arm64 aarch64 cpus 2"
	PIDs   map[string]int64 // workload name -> process ID
	// VDSO is each workload's [vdso] mapping: code outside every file mapping.
	VDSO map[string]AddrRange
	// Ready: the collector attached its eBPF programs.
	Ready bool
	// CollectorExit is the collector's exit status; -1 until reported.
	CollectorExit int
	// Metrics are the collector's profsym_ metric lines, scraped before it stopped.
	Metrics []string
	// OTLP is the collector's output file; nil when none came back.
	OTLP []byte
	// Checks are the JSON lines of `collector --check-kernel`, in order.
	Checks []string
	// CheckExit is the exit status of `collector --check-kernel`; -1 until reported.
	CheckExit int
	// Info holds what the guest told of itself with "info KEY VALUE..." lines (a module's
	// section addresses, a kernel symbol's runtime address), by key.
	Info map[string]string
	Done bool // /init reached its end
}

// AddrRange is the half-open address range [Start, End).
type AddrRange struct{ Start, End uint64 }

// Contains reports whether a lies in r.
func (r AddrRange) Contains(a uint64) bool { return a >= r.Start && a < r.End }

// maxOTLP bounds the output file the host accepts from the console.
const maxOTLP = 64 << 20

// ParseConsole reads the serial console of a guest run. It fails when a tagged line is
// malformed or the output file does not match the size and SHA-256 the guest announced.
func ParseConsole(r io.Reader) (*Guest, error) {
	g := &Guest{PIDs: map[string]int64{}, VDSO: map[string]AddrRange{}, Info: map[string]string{}, CollectorExit: -1, CheckExit: -1}
	var b64 strings.Builder
	wantSize, wantSum := -1, ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		// The serial line ends lines with CRLF; a kernel message may precede the tag.
		line := strings.TrimRight(sc.Text(), "\r")
		i := strings.Index(line, LinePrefix)
		if i < 0 {
			continue
		}
		kind, rest, _ := strings.Cut(line[i+len(LinePrefix):], " ")
		switch kind {
		case "kernel":
			g.Kernel = rest
		case "pid":
			name, pid, ok := strings.Cut(rest, " ")
			v, err := strconv.ParseInt(pid, 10, 64)
			if !ok || err != nil || v <= 0 || name == "" {
				return g, fmt.Errorf("console line %d: bad pid line %q", n, line)
			}
			g.PIDs[name] = v
		case "vdso":
			f := strings.Fields(rest)
			if len(f) != 3 {
				return g, fmt.Errorf("console line %d: bad vdso line %q", n, line)
			}
			start, err1 := strconv.ParseUint(f[1], 16, 64)
			end, err2 := strconv.ParseUint(f[2], 16, 64)
			if err1 != nil || err2 != nil || start >= end {
				return g, fmt.Errorf("console line %d: bad vdso line %q", n, line)
			}
			g.VDSO[f[0]] = AddrRange{start, end}
		case "info":
			key, value, ok := strings.Cut(rest, " ")
			if !ok || key == "" {
				return g, fmt.Errorf("console line %d: bad info line %q", n, line)
			}
			g.Info[key] = value
		case "collector-ready":
			g.Ready = true
		case "collector-exit":
			v, err := strconv.Atoi(rest)
			if err != nil || v < 0 {
				return g, fmt.Errorf("console line %d: bad exit status %q", n, rest)
			}
			g.CollectorExit = v
		case "metric":
			g.Metrics = append(g.Metrics, rest)
		case "check":
			g.Checks = append(g.Checks, rest)
		case "check-exit":
			v, err := strconv.Atoi(rest)
			if err != nil || v < 0 {
				return g, fmt.Errorf("console line %d: bad exit status %q", n, rest)
			}
			g.CheckExit = v
		case "otlp":
			size, sum, ok := strings.Cut(rest, " ")
			v, err := strconv.Atoi(size)
			if !ok || err != nil || v < 0 || v > maxOTLP || len(sum) != 2*sha256.Size {
				return g, fmt.Errorf("console line %d: bad otlp line %q", n, line)
			}
			wantSize, wantSum = v, sum
		case "b64":
			if wantSize < 0 {
				return g, fmt.Errorf("console line %d: base64 before the otlp line", n)
			}
			if b64.Len()+len(rest) > maxOTLP/3*4+4 {
				return g, fmt.Errorf("console line %d: more base64 than the %d bytes announced", n, wantSize)
			}
			b64.WriteString(rest)
		case "done":
			g.Done = true
		default:
			return g, fmt.Errorf("console line %d: unknown tag %q", n, kind)
		}
	}
	if err := sc.Err(); err != nil {
		return g, fmt.Errorf("read console: %w", err)
	}
	if wantSize < 0 {
		return g, nil
	}
	data, err := base64.StdEncoding.DecodeString(b64.String())
	if err != nil {
		return g, fmt.Errorf("output file: base64: %w", err)
	}
	if len(data) != wantSize {
		return g, fmt.Errorf("output file: %d bytes came back, the guest wrote %d", len(data), wantSize)
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != wantSum {
		return g, fmt.Errorf("output file: SHA-256 %s, the guest's is %s", got, wantSum)
	}
	g.OTLP = data
	return g, nil
}

// maxRecord bounds one request of the output file.
const maxRecord = 16 << 20

// Records splits the collector's output file into its encoded ExportProfilesServiceRequest
// messages: each is a uvarint byte count, then the message.
func Records(data []byte) ([][]byte, error) {
	br := bytes.NewReader(data)
	var out [][]byte
	for br.Len() > 0 {
		n, err := binary.ReadUvarint(br)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return out, fmt.Errorf("record %d: length: %w", len(out), err)
		}
		if n > maxRecord || n > uint64(br.Len()) {
			return out, fmt.Errorf("record %d: length %d exceeds the %d bytes left (or %d)", len(out), n, br.Len(), maxRecord)
		}
		rec := make([]byte, n)
		if _, err := io.ReadFull(br, rec); err != nil {
			return out, fmt.Errorf("record %d: %w", len(out), err)
		}
		out = append(out, rec)
	}
	return out, nil
}
