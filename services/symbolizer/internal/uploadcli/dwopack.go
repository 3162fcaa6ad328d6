package uploadcli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/schollz/progressbar/v3"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/debuginfo/dwp"
	"github.com/profsym/profsym/pkg/debuginfo/elfx"
	"github.com/profsym/profsym/pkg/uploadclient"
)

// A -gsplit-dwarf build leaves the functions and inlined frames of its executable in .dwo
// files on the build machine, named by path from the executable's skeleton units. The server
// reads no path an upload names, so when no DWARF package (.dwp) comes with the executable,
// one is made here from the .dwo files and uploaded in its place.

// splitObject is the type describe gives a .dwo file, which is packed, not uploaded.
const splitObject debuginfov1.DebuginfoType = -1

// packSet says which executables have a DWARF package among the uploaded files, and which
// build IDs got a package made, so that an executable and its debug file, both uploaded,
// make one.
type packSet struct {
	given map[string]bool // paths of the DWARF packages among the files
	// givenOf is --package-of when a package is among the files: it is that build's.
	givenOf string
	mu      sync.Mutex
	made    map[string]bool
}

func (u *UploadCmd) newPackSet(files []fileRef) *packSet {
	ps := &packSet{given: map[string]bool{}, made: map[string]bool{}}
	if u.NoPackDWO {
		return ps
	}
	for _, f := range files {
		if isPackage(f.path) {
			ps.given[f.path] = true
			ps.givenOf = u.PackageOf
		}
	}
	return ps
}

func isPackage(path string) bool {
	f, closer, err := elfx.OpenPath(path, elfx.Limits{})
	if err != nil {
		return false
	}
	// Only read: a failing close loses nothing.
	defer func() { _ = closer.Close() }()
	return f.Section(".debug_cu_index") != nil
}

// claim reports whether the package of build id is still to be made, and marks it made.
func (ps *packSet) claim(id string) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.made[id] {
		return false
	}
	ps.made[id] = true
	return true
}

// packDWO makes and uploads the DWARF package of the file just uploaded as res when it has
// skeleton units and no package: its result, and lines naming the split units left out. It
// returns nil when there is nothing to do.
func (u *UploadCmd) packDWO(ctx context.Context, client *uploadclient.Client, ref fileRef, res Result, ps *packSet, bar *progressbar.ProgressBar) (*Result, []string) {
	if u.NoPackDWO || res.Err != nil || ps.given[ref.path+".dwp"] {
		return nil, nil
	}
	if _, err := os.Stat(ref.path + ".dwp"); err == nil {
		// Beside it, where the engine and llvm-symbolizer look: the one to upload.
		return nil, nil
	}
	units, err := dwp.Skeletons(ref.path)
	if err != nil {
		// No skeletons, or none readable: the server tells what the DWARF lacks.
		return nil, nil
	}
	pr := &Result{Path: ref.path + ".dwp", Outcome: "failed"}
	ids, err := buildid.FromFile(ref.path)
	if err == nil && ids.GNU == "" {
		err = errors.New("it has no GNU build ID, which a DWARF package is stored under (link with --build-id)")
	}
	if err != nil {
		pr.Err = fmt.Errorf("split DWARF: no DWARF package made from its .dwo files: %w", err)
		return pr, nil
	}
	pr.BuildID = ids.GNU
	if ps.givenOf == ids.GNU || !ps.claim(ids.GNU) {
		// Among the files, or made from another file of this build (its debug file).
		return nil, nil
	}
	tmp, err := os.CreateTemp("", "symbolizer-upload-*.dwp")
	if err != nil {
		pr.Err = fmt.Errorf("split DWARF: %w", err)
		return pr, nil
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	packed, err := dwp.PackExecutable(ref.path, tmp)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	var notes []string
	var left []string
	for _, s := range packed.Missing() {
		notes = append(notes, fmt.Sprintf("%s: split unit left out of its DWARF package: %v", ref.path, s.Err))
		left = append(left, s.Err.Error())
	}
	if err != nil {
		pr.Err = fmt.Errorf("split DWARF: no DWARF package made from its .dwo files (%d split units; --no-pack-dwo uploads without): %w", len(units), err)
		return pr, notes
	}
	c := &candidate{path: tmp.Name(), id: ids.GNU, idType: debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU, typ: debuginfov1.DebuginfoType_DEBUGINFO_TYPE_DWARF_PACKAGE}
	st, err := os.Stat(c.path)
	if err == nil {
		c.size = st.Size()
		err = u.hash(c)
	}
	if err != nil {
		pr.Err = fmt.Errorf("split DWARF: the package made: %w", err)
		return pr, notes
	}
	if bar != nil {
		bar.ChangeMax64(bar.GetMax64() + c.size)
	}
	*pr = u.send(ctx, client, c, Result{Path: pr.Path}, bar)
	what := fmt.Sprintf("made from its .dwo files: %d of %d split units", packed.Units, len(units))
	if len(left) > 0 {
		const shown = 3
		what += "; left out: " + strings.Join(left[:min(len(left), shown)], "; ")
		if len(left) > shown {
			what += fmt.Sprintf("; and %d more", len(left)-shown)
		}
	}
	if pr.Detail != "" {
		what += "; " + pr.Detail
	}
	pr.Detail = what
	return pr, notes
}
