package server

import (
	"io"

	"connectrpc.com/connect"
	"github.com/klauspost/compress/gzip"
)

// fastGzip replaces connect's default gzip (the standard library at its default level) with
// klauspost/compress at BestSpeed: a 10,000-address Symbolize response is about 2 MB, and
// compressing it at the default level costs more CPU than the whole symbolization.
func fastGzip() connect.HandlerOption {
	return connect.WithCompression("gzip",
		func() connect.Decompressor { return &gzip.Reader{} },
		func() connect.Compressor {
			w, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed)
			return w
		})
}
