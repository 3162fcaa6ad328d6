package debugupload

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/pkg/binaryid"
	"github.com/profsym/profsym/pkg/debuginfo/buildid"
	"github.com/profsym/profsym/pkg/debuginfo/debugfile"
	"github.com/profsym/profsym/pkg/debuginfo/elfx"
	"github.com/profsym/profsym/pkg/uploadclient"
)

// DebugDir is where a process's filesystem keeps the separate debug files of its stripped
// executables and libraries, by build ID (.build-id/ab/cdef.debug): where Debian's -dbg and
// dbgsym packages, Fedora's debuginfo packages and `objcopy --only-keep-debug` layouts put
// them, on the host or inside a container image. Relative to the process's root.
const DebugDir = "usr/lib/debug"

// offerDebugFile uploads the separate debug file of j, a file without DWARF, when the
// filesystem of the process that maps it holds one under DebugDir, and the dwz
// supplementary file that debug file names. Each file's outcome is counted; failures are
// logged: the stripped file itself is offered after this whatever happened here.
func (u *Uploader) offerDebugFile(ctx context.Context, j job) {
	id := j.ids.GNU
	if !binaryid.ValidHex(id) || len(id) < 3 {
		return
	}
	rel := debugfile.BuildIDPath(DebugDir, id)
	f, ef, err := u.openInRoot(j.root, rel)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			u.log.Warn("debuginfo upload: separate debug file not read", "file", j.name, "debug_file", rel, "err", err)
		}
		return
	}
	defer f.Close()
	// The build-ID path is only a name: the file must carry the same build ID, and something
	// to symbolize with.
	got, err := buildid.Compute(ef.ReaderAt(), ef.Size())
	if err != nil || got.GNU != id {
		u.log.Warn("debuginfo upload: separate debug file of another build", "file", j.name, "debug_file", rel, "build_id", id, "its_build_id", got.GNU, "err", err)
		return
	}
	if !HasSymbols(ef) {
		return
	}
	outcome, err := u.send(ctx, f, uploadclient.File{BuildID: id, BuildIDType: debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU,
		Type: debuginfov1.DebuginfoType_DEBUGINFO_TYPE_DEBUGINFO, Size: ef.Size(), Source: debuginfov1.UploadSource_UPLOAD_SOURCE_NODE},
		j.name+" (debug file "+rel+")", nil)
	u.count(outcome)
	if err != nil {
		u.log.Warn("debuginfo upload of a separate debug file failed", "file", j.name, "debug_file", rel, "build_id", id, "err", err)
		return
	}
	u.offerSupplementary(ctx, j, ef, rel)
}

// offerSupplementary uploads the dwz supplementary file the debug file at rel (below j's
// root) names in .gnu_debugaltlink or .debug_sup: a path, absolute in the process's
// filesystem or relative to the debug file's directory.
func (u *Uploader) offerSupplementary(ctx context.Context, j job, debug *elfx.File, rel string) {
	link, ok, err := debugfile.ReadSupLink(debug)
	if err != nil {
		u.log.Warn("debuginfo upload: supplementary link not read", "file", j.name, "debug_file", rel, "err", err)
		return
	}
	if !ok || link.Name == "" || !binaryid.ValidHex(link.ID) {
		return
	}
	supRel := link.Name
	if !path.IsAbs(supRel) {
		supRel = path.Join(path.Dir(rel), supRel)
	}
	supRel = strings.TrimPrefix(path.Clean("/"+supRel), "/")
	f, ef, err := u.openInRoot(j.root, supRel)
	if err != nil {
		u.log.Warn("debuginfo upload: supplementary file not read", "file", j.name, "supplementary", link.Name, "err", err)
		return
	}
	defer f.Close()
	if got, err := debugfile.SupplementaryID(ef); err != nil || got != link.ID {
		u.log.Warn("debuginfo upload: supplementary file of another build", "file", j.name, "supplementary", link.Name,
			"want_id", link.ID, "its_id", got, "err", err)
		return
	}
	outcome, err := u.send(ctx, f, uploadclient.File{BuildID: link.ID, BuildIDType: debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU,
		Type: debuginfov1.DebuginfoType_DEBUGINFO_TYPE_SUPPLEMENTARY, Size: ef.Size(), Source: debuginfov1.UploadSource_UPLOAD_SOURCE_NODE},
		j.name+" (supplementary "+supRel+")", nil)
	u.count(outcome)
	if err != nil {
		u.log.Warn("debuginfo upload of a supplementary file failed", "file", j.name, "supplementary", link.Name, "err", err)
	}
}

// openInRoot opens the regular file name (relative) below root and reads its ELF headers.
// The file is resolved as the process that root belongs to would see it, and never outside
// it: through os.Root, a symbolic link or ".." that leads out of root is an error. The agent
// runs as root on the host, and a container's files must not lead it to upload a host file.
// O_NONBLOCK keeps a FIFO planted at the name from stalling the upload worker.
func (u *Uploader) openInRoot(root, name string) (*os.File, *elfx.File, error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, nil, err
	}
	// Only the file opened through it is used from here on.
	defer func() { _ = r.Close() }()
	f, err := r.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = fmt.Errorf("%s: not a regular file (%v)", name, st.Mode().Type())
		}
		return nil, nil, err
	}
	if st.Size() > u.opts.MaxFileBytes {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %d bytes, over the upload cap of %d", name, st.Size(), u.opts.MaxFileBytes)
	}
	ef, err := elfx.Open(f, st.Size(), elfx.DefaultLimits())
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	return f, ef, nil
}
