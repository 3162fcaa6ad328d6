package guest

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
)

// consoleOf renders data as the guest's /init writes it: base64 in lines of 76, each tagged.
func consoleOf(data []byte) string {
	sum := sha256.Sum256(data)
	var b strings.Builder
	fmt.Fprintf(&b, "@@e2e otlp %d %s\r\n", len(data), hex.EncodeToString(sum[:]))
	enc := base64.StdEncoding.EncodeToString(data)
	for len(enc) > 0 {
		n := min(76, len(enc))
		fmt.Fprintf(&b, "@@e2e b64 %s\r\n", enc[:n])
		enc = enc[n:]
	}
	return b.String()
}

func TestParseConsole(t *testing.T) {
	payload := bytes.Repeat([]byte("profile\x00\x01"), 40)
	good := "[    1.0] Booting Linux\r\n@@e2e kernel 6.1.0-56-arm64 aarch64 cpus 2\r\n" +
		"@@e2e check {\"name\":\"on_exec\",\"loaded\":true}\r\n@@e2e check {\"kernel\":\"6.1.0-56-arm64\"}\r\n@@e2e check-exit 0\r\n" +
		"@@e2e pid chain-gcc 97\r\n@@e2e pid qsort 99\r\n@@e2e vdso qsort ffff8000 ffff9000\r\n" +
		"@@e2e info section.brd..text 0xffffffffc0a01000\r\n" +
		"time=... level=INFO msg=\"metrics endpoint listening\"\r\n" +
		"@@e2e collector-ready\r\n@@e2e metric profsym_collector_samples_total 12\r\n" +
		"@@e2e collector-exit 0\r\n" + consoleOf(payload) + "@@e2e done\r\n[   35.9] reboot: Power down\r\n"
	g, err := ParseConsole(strings.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	if g.Kernel != "6.1.0-56-arm64 aarch64 cpus 2" || g.PIDs["chain-gcc"] != 97 || g.PIDs["qsort"] != 99 ||
		g.VDSO["qsort"] != (AddrRange{0xffff8000, 0xffff9000}) || !g.VDSO["qsort"].Contains(0xffff8fff) || g.VDSO["qsort"].Contains(0xffff9000) ||
		!g.Ready || g.CollectorExit != 0 || len(g.Metrics) != 1 || !g.Done || !bytes.Equal(g.OTLP, payload) ||
		len(g.Checks) != 2 || g.Checks[1] != `{"kernel":"6.1.0-56-arm64"}` || g.CheckExit != 0 ||
		g.Info["section.brd..text"] != "0xffffffffc0a01000" {
		t.Fatalf("parsed %+v", g)
	}

	// A kernel message that lands on the line before a tag does not hide it.
	g, err = ParseConsole(strings.NewReader("[   12.3] random: crng init done@@e2e collector-exit 1\r\n"))
	if err != nil || g.CollectorExit != 1 || g.OTLP != nil || g.Ready || g.CheckExit != -1 {
		t.Fatalf("got %+v, %v", g, err)
	}

	corrupt := strings.Replace(consoleOf(payload), "@@e2e b64 c", "@@e2e b64 d", 1)
	bad := []struct{ name, console, want string }{
		{"bad pid", "@@e2e pid chain-gcc x\n", "bad pid line"},
		{"negative pid", "@@e2e pid chain-gcc -4\n", "bad pid line"},
		{"vdso without end", "@@e2e vdso qsort ffff8000\n", "bad vdso line"},
		{"vdso not hex", "@@e2e vdso qsort ffff8000 zz\n", "bad vdso line"},
		{"vdso backwards", "@@e2e vdso qsort 2000 1000\n", "bad vdso line"},
		{"bad exit", "@@e2e collector-exit\n", "bad exit status"},
		{"info without value", "@@e2e info key\n", "bad info line"},
		{"bad check exit", "@@e2e check-exit one\n", "bad exit status"},
		{"unknown tag", "@@e2e whatever 1\n", "unknown tag"},
		{"base64 first", "@@e2e b64 AAAA\n", "before the otlp line"},
		{"short sum", "@@e2e otlp 3 abcd\n", "bad otlp line"},
		{"huge size", fmt.Sprintf("@@e2e otlp %d %s\n", maxOTLP+1, strings.Repeat("0", 64)), "bad otlp line"},
		{"truncated", strings.Join(strings.SplitAfter(consoleOf(payload), "\n")[:3], ""), "bytes came back"},
		{"corrupted", corrupt, "SHA-256"},
		{"not base64", "@@e2e otlp 3 " + strings.Repeat("0", 64) + "\n@@e2e b64 !!!!\n", "base64"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParseConsole(strings.NewReader(tt.console)); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one saying %q", err, tt.want)
			}
		})
	}
}

func TestRecords(t *testing.T) {
	var file []byte
	msgs := [][]byte{[]byte("first"), {}, bytes.Repeat([]byte{7}, 300)}
	for _, m := range msgs {
		file = binary.AppendUvarint(file, uint64(len(m)))
		file = append(file, m...)
	}
	got, err := Records(file)
	if err != nil || len(got) != len(msgs) {
		t.Fatalf("Records: %d records, %v", len(got), err)
	}
	for i := range msgs {
		if !bytes.Equal(got[i], msgs[i]) {
			t.Errorf("record %d = %q, want %q", i, got[i], msgs[i])
		}
	}
	for _, tt := range []struct {
		name string
		data []byte
		want string
	}{
		{"cut in the message", file[:len(file)-1], "exceeds"},
		{"cut in the length", []byte{0x80}, "unexpected EOF"},
		{"length beyond the bound", binary.AppendUvarint(nil, maxRecord+1), "exceeds"},
		{"overlong varint", bytes.Repeat([]byte{0xff}, 11), "overflow"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Records(tt.data); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one saying %q", err, tt.want)
			}
		})
	}
}

func FuzzParseConsole(f *testing.F) {
	f.Add([]byte("@@e2e kernel x\n@@e2e pid a 1\n@@e2e collector-exit 0\n" + consoleOf([]byte("abc")) + "@@e2e done\n"))
	f.Add([]byte("@@e2e otlp 0 " + strings.Repeat("0", 64) + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := ParseConsole(bytes.NewReader(data))
		if g == nil {
			t.Fatal("nil Guest")
		}
		if err == nil && g.OTLP != nil {
			if _, err := Records(g.OTLP); err != nil {
				return // any bytes may come back; Records must only not panic
			}
		}
	})
}

func FuzzRecords(f *testing.F) {
	f.Add(binary.AppendUvarint(nil, 3))
	f.Add(append(binary.AppendUvarint(nil, 2), 'h', 'i'))
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, err := Records(data)
		total := 0
		for _, r := range recs {
			total += len(r)
		}
		if err == nil && total > len(data) {
			t.Fatalf("%d bytes of records from %d bytes", total, len(data))
		}
	})
}
