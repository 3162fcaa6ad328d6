package gzipcodec

import (
	"bytes"
	stdgzip "compress/gzip"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/encoding"
)

func payload(n int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	var b bytes.Buffer
	for b.Len() < n {
		// Half repetitive text, half noise, like a profile's names and varints.
		b.WriteString("std::vector<int>::push_back /usr/include/c++/12/bits/stl_vector.h ")
		for range 16 {
			b.WriteByte(byte(r.Uint32()))
		}
	}
	return b.Bytes()[:n]
}

func compress(t *testing.T, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf)
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestRoundTripEveryLevel(t *testing.T) {
	defer func() { _ = SetLevel(DefaultLevel) }()
	data := payload(200_000)
	for l := 1; l <= 9; l++ {
		if err := SetLevel(l); err != nil {
			t.Fatal(err)
		}
		// Twice per level: the second writer and reader come from the pools.
		for range 2 {
			z := compress(t, data)
			// Any gzip reads what we write...
			sr, err := stdgzip.NewReader(bytes.NewReader(z))
			if err != nil {
				t.Fatalf("level %d: %v", l, err)
			}
			got, err := io.ReadAll(sr)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("level %d: standard reader: %v, %d bytes of %d", l, err, len(got), len(data))
			}
			// ...and we read what we write.
			r, err := NewReader(bytes.NewReader(z))
			if err != nil {
				t.Fatal(err)
			}
			got, err = io.ReadAll(r)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("level %d: %v, %d bytes of %d", l, err, len(got), len(data))
			}
			if n, err := r.Read(make([]byte, 8)); n != 0 || err != io.EOF {
				t.Fatalf("read after the end: %d %v, want 0 EOF", n, err)
			}
		}
	}
}

func TestLevelsTradeSizeForSpeed(t *testing.T) {
	defer func() { _ = SetLevel(DefaultLevel) }()
	data := payload(200_000)
	sizes := map[int]int{}
	for _, l := range []int{1, 9} {
		if err := SetLevel(l); err != nil {
			t.Fatal(err)
		}
		sizes[l] = len(compress(t, data))
	}
	if sizes[9] >= sizes[1] || sizes[1] >= len(data) {
		t.Fatalf("sizes %v of %d bytes: the level is not applied", sizes, len(data))
	}
}

func TestSetLevelRejects(t *testing.T) {
	for _, l := range []int{-1, 0, 10} {
		if err := SetLevel(l); err == nil || !strings.Contains(err.Error(), "want 1 (fastest) to 9") {
			t.Fatalf("level %d: %v", l, err)
		}
	}
	if l := level.Load(); l != DefaultLevel {
		t.Fatalf("a rejected level changed the level to %d", l)
	}
}

func TestReadsStandardGzip(t *testing.T) {
	data := payload(50_000)
	var buf bytes.Buffer
	w := stdgzip.NewWriter(&buf)
	// Two members: gzip readers concatenate them.
	_, _ = w.Write(data[:20_000])
	_ = w.Close()
	w = stdgzip.NewWriter(&buf)
	_, _ = w.Write(data[20_000:])
	_ = w.Close()
	r, err := NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("%v, %d bytes of %d", err, len(got), len(data))
	}
}

func TestBadStreams(t *testing.T) {
	z := compress(t, payload(10_000))
	flipped := bytes.Clone(z)
	flipped[len(flipped)-6] ^= 0xff // inside the CRC-32 trailer
	for _, c := range []struct {
		name string
		in   []byte
		want string // in NewReader's or Read's error
	}{
		{"not gzip", []byte("plain text, not gzip"), "gzip header"},
		{"empty", nil, "gzip header"},
		{"truncated", z[:len(z)/2], "unexpected EOF"},
		{"bad checksum", flipped, "checksum"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := NewReader(bytes.NewReader(c.in))
			if err == nil {
				_, err = io.ReadAll(r)
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

func TestIsGRPCsGzip(t *testing.T) {
	c := encoding.GetCompressor(Name)
	if _, ok := c.(grpcCompressor); !ok {
		t.Fatalf("gRPC's %q compressor is %T, not this package's", Name, c)
	}
	data := payload(30_000)
	var buf bytes.Buffer
	w, err := c.Compress(&buf)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = w.Write(data)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := c.Decompress(&buf)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("%v, %d bytes of %d", err, len(got), len(data))
	}
}

// TestConcurrentStreams: pooled writers and readers never mix two streams.
func TestConcurrentStreams(t *testing.T) {
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				data := payload(1000 + 997*g + 13*i)
				var buf bytes.Buffer
				w := NewWriter(&buf)
				_, _ = w.Write(data)
				if err := w.Close(); err != nil {
					errs <- err.Error()
					return
				}
				r, err := NewReader(&buf)
				if err != nil {
					errs <- err.Error()
					return
				}
				got, err := io.ReadAll(r)
				if err != nil || !bytes.Equal(got, data) {
					errs <- "stream mixed up"
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}

func BenchmarkCompress60KB(b *testing.B) {
	data := payload(60_000)
	var buf bytes.Buffer
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		buf.Reset()
		w := NewWriter(&buf)
		_, _ = w.Write(data)
		_ = w.Close()
	}
	b.ReportMetric(float64(buf.Len())/float64(len(data)), "ratio")
}
