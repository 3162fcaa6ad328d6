package pprofcmd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/alecthomas/kong"

	"github.com/profsym/profsym/services/symbolizer/internal/server"
)

// serveStore answers Symbolize from a folder store with the symbolizer's own server, on a
// loopback port of this process for as long as the command runs: the same lookup by build
// ID, normalization and index as `symbolizer serve`, without running one. It returns the
// server's URL and what stops it.
func serveStore(dir string) (string, func(), error) {
	var cfg server.Config
	// The server's defaults are its flags' defaults: kong fills them in.
	parser, err := kong.New(&cfg, kong.Name("symbolizer pprof --store-dir"))
	if err != nil {
		return "", nil, fmt.Errorf("the symbolizer's configuration: %w", err)
	}
	if _, err := parser.Parse([]string{"--store-dir", dir, "--listen", "127.0.0.1:0", "--log-level", "error"}); err != nil {
		return "", nil, fmt.Errorf("the symbolizer's configuration: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	s, err := server.New(ctx, &cfg, log)
	if err != nil {
		cancel()
		return "", nil, fmt.Errorf("open the store %s: %w", dir, err)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		s.Close()
		return "", nil, fmt.Errorf("listen on loopback: %w", err)
	}
	srv := server.NewHTTPServer(s.Handler, log)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("serve the store", "err", err)
		}
	}()
	stop := func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = srv.Shutdown(sctx)
		<-done
		cancel()
		s.Close()
	}
	return "http://" + ln.Addr().String(), stop, nil
}
