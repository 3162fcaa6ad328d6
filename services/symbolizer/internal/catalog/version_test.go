package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"testing"

	"github.com/profsym/profsym/pkg/testsupport"
)

// TestRecordVersions: records and aliases are written with their format version; one written
// without it (an earlier release) reads as version 1; one of a later version is refused, with
// an error naming both versions, and never written over by an upload.
func TestRecordVersions(t *testing.T) {
	ctx := context.Background()
	m := newCatalog(t, nil)
	f := load(t, testsupport.CompileC(t, prog, "-g"))
	id := ID{Type: gnu, ID: f.ids.GNU}
	r, err := upload(t, m, f, id, dbg, u, f.data)
	if err != nil {
		t.Fatal(err)
	}
	raw := func(key string) map[string]any {
		t.Helper()
		rc, _, err := m.Store().Open(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	put := func(key string, v map[string]any) {
		t.Helper()
		b, _ := json.Marshal(v)
		if err := m.Store().Put(ctx, key, bytes.NewReader(b), int64(len(b))); err != nil {
			t.Fatal(err)
		}
	}
	recKey, aKey := r.Key+"/record.json", aliasKey(id)
	for _, k := range []string{recKey, aKey} {
		if v := raw(k)["version"]; v != float64(recordVersion) {
			t.Fatalf("%s written with version %v, want %d", k, v, recordVersion)
		}
	}
	rec, alias := raw(recKey), raw(aKey)

	// An earlier release's record and alias: no version field.
	delete(rec, "version")
	delete(alias, "version")
	put(recKey, rec)
	put(aKey, alias)
	if got, err := m.Resolve(ctx, id); err != nil || got.Current.SHA256 != f.sum {
		t.Fatalf("record without a version: %v", err)
	}

	// A later release's record: refused, and left as it is.
	rec["version"] = float64(recordVersion + 1)
	put(recKey, rec)
	if _, err := m.Resolve(ctx, id); !errors.Is(err, ErrNewerFormat) {
		t.Fatalf("Resolve of a record of version %d: %v, want ErrNewerFormat", recordVersion+1, err)
	}
	if _, err := upload(t, m, f, id, dbg, u, f.data); err == nil {
		t.Fatal("an upload over a record of a later version succeeded")
	}
	if v := raw(recKey)["version"]; v != float64(recordVersion+1) {
		t.Fatalf("the later release's record was written over (version %v)", v)
	}

	// A later release's alias: refused too.
	rec["version"] = float64(recordVersion)
	put(recKey, rec)
	alias["version"] = float64(recordVersion + 1)
	put(aKey, alias)
	if _, err := m.Resolve(ctx, id); !errors.Is(err, ErrNewerFormat) {
		t.Fatalf("Resolve through an alias of a later version: %v, want ErrNewerFormat", err)
	}
}
