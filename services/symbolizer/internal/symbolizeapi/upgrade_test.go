package symbolizeapi

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/pkg/debuginfo/index"
	"github.com/profsym/profsym/services/symbolizer/internal/catalog"
	"github.com/profsym/profsym/services/symbolizer/internal/indexcache"
	"github.com/profsym/profsym/services/symbolizer/internal/metrics"
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

// TestIndexOfEarlierReleaseKey: a store written by a release that kept indexes at
// <sha256>.index, whatever their format. An index there of this build's format is read (no
// build) and copied to this format's key; one of another format is left where it is, for the
// release that reads it, and this build stores its own beside it; a string table there is
// never read (its header does not say which index format it belongs to).
func TestIndexOfEarlierReleaseKey(t *testing.T) {
	ctx := context.Background()
	svc, gnu, lo, hi := setup(t, nil)
	want, err := svc.Symbolize(ctx, batch(gnu, lo, hi, 300))
	if err != nil {
		t.Fatal(err)
	}
	st := svc.meta.Store()
	rec, err := svc.meta.Resolve(ctx, catalog.ID{Type: debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU, ID: gnu})
	if err != nil {
		t.Fatal(err)
	}
	f := rec.Current
	ixKey, strKey, legacy := f.IndexObject(), f.StringsObject(), f.LegacyIndexObjectOf("")
	if !strings.Contains(ixKey, fmt.Sprintf(".v%d.", index.FormatVersion)) || !strings.Contains(strKey, fmt.Sprintf(".v%d.", index.FormatVersion)) {
		t.Fatalf("keys %s, %s do not name the format version %d", ixKey, strKey, index.FormatVersion)
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
	blob := read(ixKey)
	put := func(k string, b []byte) {
		if err := st.Put(ctx, k, bytes.NewReader(b), int64(len(b))); err != nil {
			t.Fatal(err)
		}
	}
	// The earlier release's layout: only <sha256>.index (and a string table that is not this
	// index's: it must not be read).
	reset := func(legacyBlob []byte) {
		for _, k := range []string{ixKey, strKey} {
			if err := st.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
		put(legacy, legacyBlob)
		put(f.Object+".strings", []byte("not a string table of this index"))
	}
	fresh := func() (*Service, *metrics.Metrics) {
		m := metrics.New()
		return New(svc.meta, indexcache.New(1<<30), resultcache.New(resultcache.Options{LocalSize: 10000}), nil, m, Options{}), m
	}
	builds := func(m *metrics.Metrics) float64 {
		return testutil.ToFloat64(m.IndexBuilds.WithLabelValues("ok"))
	}

	// Same format: adopted, not built.
	reset(blob)
	s1, m1 := fresh()
	got, err := s1.Symbolize(ctx, batch(gnu, lo, hi, 300))
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got.Msg, want.Msg) {
		t.Fatal("answer from the earlier release's key differs")
	}
	if n := builds(m1); n != 0 {
		t.Fatalf("%v index builds, want 0: the index at the earlier key is of this format", n)
	}
	if !bytes.Equal(read(ixKey), blob) {
		t.Fatal("the adopted index was not copied to this format's key")
	}
	if _, err := index.UnmarshalStrings(read(strKey)); err != nil {
		t.Fatalf("string table at this format's key: %v", err)
	}

	// Another format (an older one in the header): built here once, stored under this
	// format's keys, the earlier one untouched.
	other := bytes.Clone(blob)
	binary.LittleEndian.PutUint16(other[8:], uint16(index.FormatVersion-1))
	reset(other)
	s2, m2 := fresh()
	for range 2 {
		got, err = s2.Symbolize(ctx, batch(gnu, lo, hi, 300))
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got.Msg, want.Msg) {
			t.Fatal("answer differs when the earlier key holds another format")
		}
	}
	if n := builds(m2); n != 1 {
		t.Fatalf("%v index builds, want 1", n)
	}
	if !bytes.Equal(read(legacy), other) {
		t.Fatal("the index of the other format was overwritten: its release would rebuild it in turn")
	}
	if _, err := index.Unmarshal(read(ixKey)); err != nil {
		t.Fatalf("this format's index was not stored: %v", err)
	}
	// A third replica of this release loads what the second stored.
	s3, m3 := fresh()
	if got, err = s3.Symbolize(ctx, batch(gnu, lo, hi, 300)); err != nil || !proto.Equal(got.Msg, want.Msg) {
		t.Fatalf("third replica: %v", err)
	}
	if n := builds(m3); n != 0 {
		t.Fatalf("third replica built the index %v times, want 0", n)
	}
}
