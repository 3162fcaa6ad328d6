package debuginfod

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"

	debuginfov1 "github.com/profsym/profsym/gen/profsym/debuginfo/v1"
	"github.com/profsym/profsym/services/symbolizer/internal/auth"
	"github.com/profsym/profsym/services/symbolizer/internal/catalog"
	"github.com/profsym/profsym/services/symbolizer/internal/store"
)

// Handler serves the store read-only at /buildid/<id>/debuginfo and /buildid/<id>/executable.
// tokens is nil when reads are open; log nil means slog.Default(); used, when set, is told the
// key of each record served (the record of last use that retention reads).
func Handler(md *catalog.Catalog, tokens *auth.Tokens, log *slog.Logger, used func(recordKey, filename string)) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "use GET", http.StatusMethodNotAllowed)
			return
		}
		if tokens != nil {
			if err := tokens.Check(r.Header.Get("Authorization")); err != nil {
				http.Error(w, err.Error(), auth.HTTPStatus(err))
				return
			}
		}
		parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/buildid/"), "/")
		if len(parts) != 2 || (parts[1] != "debuginfo" && parts[1] != "executable") {
			http.NotFound(w, r)
			return
		}
		id := parts[0]
		var rec *catalog.Record
		err := catalog.ErrNotFound
		for _, typ := range []debuginfov1.BuildIDType{debuginfov1.BuildIDType_BUILD_ID_TYPE_GNU, debuginfov1.BuildIDType_BUILD_ID_TYPE_HTLHASH} {
			if catalog.ValidateID(typ, id) != nil {
				continue
			}
			rec, err = md.Resolve(r.Context(), catalog.ID{Type: typ, ID: id})
			if err == nil || !errors.Is(err, catalog.ErrNotFound) {
				break
			}
		}
		if errors.Is(err, catalog.ErrNotFound) {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		f := rec.Current
		if (parts[1] == "debuginfo" && !f.Quality.DWARF) || (parts[1] == "executable" && !f.Runnable) {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		if used != nil {
			used(rec.Key, "")
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("X-Debuginfod-Size", strconv.FormatUint(f.Size, 10))
		if l, ok := md.Store().(store.Localer); ok {
			path, err := l.LocalPath(f.Object)
			if err == nil {
				if fh, err := os.Open(path); err == nil {
					defer fh.Close()
					http.ServeContent(w, r, "", f.UploadedAt, fh)
					return
				}
			}
		}
		rc, size, err := md.Store().Open(r.Context(), f.Object)
		if errors.Is(err, store.ErrNotExist) {
			// Deleted after the record was read: gone, as a lookup now finds it.
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		defer rc.Close()
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		if r.Method == http.MethodHead {
			return
		}
		// The status and length are sent: the client sees a short body, the log says why. A
		// client that hung up is routine and not worth a warning.
		if n, err := io.Copy(w, rc); err != nil {
			lvl := slog.LevelWarn
			if r.Context().Err() != nil {
				lvl = slog.LevelDebug
			}
			log.Log(r.Context(), lvl, "debuginfod response cut short", "build_id", id, "object", f.Object, "sent", n, "size", size, "err", err)
		}
	})
}
