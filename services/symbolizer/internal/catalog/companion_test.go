package catalog

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/pkg/testsupport"
)

func TestCompanionsVariant(t *testing.T) {
	sup := &File{SHA256: strings.Repeat("ab", 32)}
	pkg := &File{SHA256: strings.Repeat("cd", 32)}
	avail, missing := debuginfov1.CompanionState_COMPANION_STATE_AVAILABLE, debuginfov1.CompanionState_COMPANION_STATE_MISSING
	for _, c := range []struct {
		name    string
		c       Companions
		variant string
		states  []debuginfov1.CompanionState
		missing bool
	}{
		{"none needed", Companions{PackageID: "aa", Package: pkg}, "", nil, false},
		{"supplementary missing", Companions{SupplementaryID: "12"}, ".nosup", []debuginfov1.CompanionState{missing}, true},
		{"supplementary stored", Companions{SupplementaryID: "12", Supplementary: sup}, ".sup-abababababababab", []debuginfov1.CompanionState{avail}, false},
		{"package missing", Companions{PackageID: "aa", NeedsPackage: true}, ".nodwp", []debuginfov1.CompanionState{missing}, true},
		{"both stored", Companions{SupplementaryID: "12", Supplementary: sup, PackageID: "aa", NeedsPackage: true, Package: pkg},
			".sup-abababababababab.dwp-cdcdcdcdcdcdcdcd", []debuginfov1.CompanionState{avail, avail}, false},
		{"package stored, supplementary missing", Companions{SupplementaryID: "12", PackageID: "aa", NeedsPackage: true, Package: pkg},
			".nosup.dwp-cdcdcdcdcdcdcdcd", []debuginfov1.CompanionState{missing, avail}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.c.Variant(); got != c.variant {
				t.Errorf("Variant = %q, want %q", got, c.variant)
			}
			var states []debuginfov1.CompanionState
			for _, p := range c.c.Proto() {
				states = append(states, p.State)
			}
			if len(states) != len(c.states) || (len(states) > 0 && strings.Join(stateNames(states), ",") != strings.Join(stateNames(c.states), ",")) {
				t.Errorf("states %v, want %v", states, c.states)
			}
			if c.c.Missing() != c.missing || (c.c.Describe() != "") != c.missing {
				t.Errorf("Missing %v, Describe %q; want missing %v", c.c.Missing(), c.c.Describe(), c.missing)
			}
		})
	}
}

func stateNames(ss []debuginfov1.CompanionState) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.String())
	}
	return out
}

func sh(t *testing.T, dir string, args ...string) {
	t.Helper()
	testsupport.RequireTools(t, args[0])
	cmd := exec.CommandContext(t.Context(), args[0], args[1:]...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
}

// TestCompanionUploads: a dwz common file is recognized whatever it is declared as, a file
// that is none is refused as one; a DWARF package is stored beside its executable's record
// under the executable's GNU build ID only, refused when it is no package, and deleted with
// the executable's record; indexes built while a companion is missing are stored under
// their own variant and go with the file.
func TestCompanionUploads(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src := "#include <stdio.h>\nstatic inline __attribute__((always_inline)) int sq(int v) { return v * v; }\n" +
		"__attribute__((noinline)) int f(int n) { return sq(n) + 1; }\nint main(int c, char **v) { (void)v; printf(\"%d\\n\", f(c)); return 0; }\n"
	for _, p := range []string{"p1", "p2"} {
		if err := os.WriteFile(filepath.Join(dir, p+".c"), []byte(strings.ReplaceAll(src, " f(", " "+p+"f(")), 0o644); err != nil {
			t.Fatal(err)
		}
		sh(t, dir, "gcc", "-g", "-O2", "-Wl,--build-id", "-o", p, p+".c")
	}
	sh(t, dir, "dwz", "-m", "common.debug", "-M", "common.debug", "p1", "p2")
	sh(t, dir, "gcc", "-g", "-gdwarf-4", "-gsplit-dwarf", "-O2", "-c", "p1.c", "-o", "s.o")
	sh(t, dir, "gcc", "-Wl,--build-id", "-o", "s", "s.o")
	sh(t, dir, "dwp", "-e", "s", "-o", "s.dwp")

	m := newCatalog(t, nil)
	p1 := load(t, filepath.Join(dir, "p1"))
	common := load(t, filepath.Join(dir, "common.debug"))
	split, dwp := load(t, filepath.Join(dir, "s")), load(t, filepath.Join(dir, "s.dwp"))

	rec, err := upload(t, m, p1, ID{gnu, p1.ids.GNU}, dbg, u, p1.data)
	if err != nil {
		t.Fatal(err)
	}
	f := rec.Current
	if f.Supplementary != common.ids.GNU || f.Quality.DWARFError != "" {
		t.Fatalf("dwz'ed file: supplementary %q (want %q), DWARF error %q", f.Supplementary, common.ids.GNU, f.Quality.DWARFError)
	}
	if _, err := m.Store().Size(ctx, f.IndexObjectOf(".nosup")); err != nil {
		t.Fatalf("index built without the common file is not stored under its variant: %v", err)
	}

	// A file that is no common file is refused as one; the common file is taken as one
	// even declared as plain debuginfo.
	if _, err := upload(t, m, split, ID{gnu, split.ids.GNU}, debuginfov1.DebuginfoType_DEBUGINFO_TYPE_SUPPLEMENTARY, u, split.data); !errors.Is(err, ErrVerification) {
		t.Errorf("an executable declared supplementary: %v", err)
	}
	rec, err = upload(t, m, common, ID{gnu, common.ids.GNU}, dbg, u, common.data)
	if err != nil || rec.Current.Type != debuginfov1.DebuginfoType_DEBUGINFO_TYPE_SUPPLEMENTARY {
		t.Fatalf("common file: %v, %+v", err, rec)
	}
	c, err := m.Companions(ctx, f)
	if err != nil || c.Supplementary == nil || c.Missing() {
		t.Fatalf("companions after the common file: %+v, %v", c, err)
	}
	checkQualityWith(t, m, f, c)

	// Packages: GNU build IDs only, packages only.
	pkgType := debuginfov1.DebuginfoType_DEBUGINFO_TYPE_DWARF_PACKAGE
	if _, err := upload(t, m, dwp, ID{htl, split.ids.HTLHash}, pkgType, u, dwp.data); err == nil || !strings.Contains(err.Error(), "GNU build ID") {
		t.Errorf("package under an htlhash: %v", err)
	}
	if _, err := upload(t, m, split, ID{gnu, split.ids.GNU}, pkgType, u, split.data); !errors.Is(err, ErrVerification) {
		t.Errorf("an executable declared a package: %v", err)
	}
	exeRec, err := upload(t, m, split, ID{gnu, split.ids.GNU}, dbg, u, split.data)
	if err != nil || exeRec.Current.SkeletonUnits != 1 {
		t.Fatalf("split executable: %v, %+v", err, exeRec)
	}
	// The package's record does not take the executable's ID: both are stored.
	pkgRec, err := upload(t, m, dwp, ID{gnu, split.ids.GNU}, pkgType, u, dwp.data)
	if err != nil || pkgRec.Current.PackageUnits != 1 || pkgRec.Key == exeRec.Key {
		t.Fatalf("package: %v, %+v", err, pkgRec)
	}
	if again, err := m.Finish(ctx, ID{gnu, split.ids.GNU}, pkgRec.Current.UploadID); err != nil || again.Key != pkgRec.Key {
		t.Errorf("repeated FinishUpload of the package: %v, %+v", err, again)
	}
	if r, err := m.Resolve(ctx, ID{gnu, split.ids.GNU}); err != nil || r.Current.SHA256 != split.sum {
		t.Fatalf("the executable's ID resolves to %+v, %v", r, err)
	}
	c, err = m.Companions(ctx, exeRec.Current)
	if err != nil || c.Package == nil || c.Variant() != ".dwp-"+dwp.sum[:16] {
		t.Fatalf("companions of the split executable: %+v, %v", c, err)
	}

	// Paging one record at a time sees the executable and its package, which share a
	// build ID, and everything else once.
	var seen []string
	for token := ""; ; {
		page, next, err := m.List(ctx, 1, token)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range page {
			seen = append(seen, d.BuildId[:8]+" "+d.Type.String())
		}
		if next == "" {
			break
		}
		token = next
	}
	if len(seen) != 4 || !slices.Contains(seen, split.ids.GNU[:8]+" "+pkgType.String()) || !slices.Contains(seen, split.ids.GNU[:8]+" "+dbg.String()) {
		t.Errorf("paged list: %q", seen)
	}

	// Deleting the executable deletes its package and every index variant.
	if err := m.Delete(ctx, ID{gnu, split.ids.GNU}); err != nil {
		t.Fatal(err)
	}
	if p, err := m.StoredPackage(ctx, split.ids.GNU); err != nil || p != nil {
		t.Errorf("package after the executable's deletion: %+v, %v", p, err)
	}
	if err := m.Delete(ctx, ID{gnu, p1.ids.GNU}); err != nil {
		t.Fatal(err)
	}
	if left, err := m.Store().List(ctx, f.Object); err != nil || len(left) != 0 {
		t.Errorf("left after deleting the dwz'ed file: %v, %v", left, err)
	}
}

// checkQualityWith: f was verified without its common file, which c now holds. Read with it,
// f has inline frames: computed once and stored beside the variant's index, computed again
// when that object does not decode, and for a record written before records kept the variant
// their quality was found with.
func checkQualityWith(t *testing.T, m *Catalog, f *File, c Companions) {
	t.Helper()
	ctx := context.Background()
	if f.Quality.Inlines || f.QualityVariant != ".nosup" {
		t.Fatalf("verified without the common file: inlines %v, variant %q", f.Quality.Inlines, f.QualityVariant)
	}
	r, err := m.Resolve(ctx, f.BuildID)
	if err != nil {
		t.Fatal(err)
	}
	key := f.QualityObjectOf(c.Variant())
	for _, step := range []struct {
		name  string
		setup func()
	}{
		{"first read", func() {}},
		{"stored", func() {}},
		{"undecodable object", func() {
			if err := m.Store().Put(ctx, key, strings.NewReader("{not json"), 9); err != nil {
				t.Fatal(err)
			}
		}},
		{"record without a variant", func() {
			if err := m.Store().Delete(ctx, key); err != nil {
				t.Fatal(err)
			}
			r.Current.QualityVariant = ""
		}},
	} {
		step.setup()
		d, err := m.Describe(ctx, r)
		if err != nil || !d.GetQuality().GetHasInlineInfo() || !d.GetQuality().GetHasDwarf() || d.GetQuality().GetDwarfVersion() == 0 {
			t.Fatalf("%s: quality %v, %v", step.name, d.GetQuality(), err)
		}
		var sq storedQuality
		if err := m.readJSON(ctx, key, &sq); err != nil || !sq.Quality.Inlines {
			t.Fatalf("%s: stored quality %+v, %v", step.name, sq, err)
		}
		if _, err := m.Store().Size(ctx, f.IndexObjectOf(c.Variant())); err != nil {
			t.Fatalf("%s: the index built with the common file is not stored: %v", step.name, err)
		}
	}
}
