package symbolizeapi

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/profsym/profsym/services/symbolizer/internal/indexcache"
	"github.com/profsym/profsym/services/symbolizer/internal/resultcache"
)

// TestStoredArtefactsOfAnotherVersion stores the index and the string table of a file as
// another release would have written them (an older and a newer format version in their
// headers) and checks that a replica with nothing in memory rebuilds them, answers exactly as
// before, and stores them again in its own format: never misread.
func TestStoredArtefactsOfAnotherVersion(t *testing.T) {
	ctx := context.Background()
	svc, gnu, lo, hi := setup(t, nil)
	want, err := svc.Symbolize(ctx, batch(gnu, lo, hi, 300))
	if err != nil {
		t.Fatal(err)
	}
	st := svc.meta.Store()
	keys, err := st.List(ctx, "records/")
	if err != nil {
		t.Fatal(err)
	}
	var artefacts []string
	for _, k := range keys {
		if strings.HasSuffix(k, ".index") || strings.HasSuffix(k, ".strings") {
			artefacts = append(artefacts, k)
		}
	}
	if len(artefacts) != 2 {
		t.Fatalf("stored index and string table: %v", artefacts)
	}
	read := func(k string) []byte {
		rc, _, err := st.Open(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	current := map[string]uint16{}
	for _, k := range artefacts {
		current[k] = binary.LittleEndian.Uint16(read(k)[8:]) // the header's format version
	}
	for _, delta := range []int{-1, +1} {
		for _, k := range artefacts {
			b := read(k)
			binary.LittleEndian.PutUint16(b[8:], uint16(int(current[k])+delta))
			if err := st.Put(ctx, k, bytes.NewReader(b), int64(len(b))); err != nil {
				t.Fatal(err)
			}
		}
		// A fresh replica, reading results through a result cache (so the string table is
		// read on its own first, as a replica without the index does).
		fresh := New(svc.meta, indexcache.New(1<<30), resultcache.New(resultcache.Options{LocalSize: 10000}), nil, nil, Options{})
		got, err := fresh.Symbolize(ctx, batch(gnu, lo, hi, 300))
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got.Msg, want.Msg) {
			t.Fatalf("format version %+d: the answer differs from the one before", delta)
		}
		for _, k := range artefacts {
			if v := binary.LittleEndian.Uint16(read(k)[8:]); v != current[k] {
				t.Errorf("format version %+d: %s was not stored again in version %d (it holds %d)", delta, k, current[k], v)
			}
		}
	}
}
