package main

import (
	"testing"
	"time"

	"github.com/alecthomas/kong"
)

func parse(t *testing.T, args []string, env map[string]string) cli {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	var c cli
	p, err := kong.New(&c, kong.Name("gateway"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Parse(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	return c
}

func TestFlags(t *testing.T) {
	c := parse(t, nil, nil)
	if c.GRPCListen != ":4317" || c.HTTPListen != ":4318" || c.AdminListen != ":8888" ||
		c.SymbolizerURL != "http://127.0.0.1:7070" || c.SymbolizeTimeout != 5*time.Second || !c.OTLPGzip || c.OTLPGzipLevel != 1 || c.AdminPprof || c.GCMinHeadroom != 256<<20 {
		t.Fatalf("defaults: %+v", c)
	}
	c = parse(t, []string{"--otlp-header", "a=1", "--otlp-header", "b=2", "--symbolizer-url", "", "--no-otlp-gzip", "--queue-bytes", "1024", "--otlp-gzip-level", "9", "--admin-pprof"}, nil)
	if c.OTLPHeader["a"] != "1" || c.OTLPHeader["b"] != "2" || c.SymbolizerURL != "" || c.OTLPGzip || c.QueueBytes != 1024 ||
		c.OTLPGzipLevel != 9 || !c.AdminPprof {
		t.Fatalf("flags: %+v", c)
	}
	c = parse(t, nil, map[string]string{
		"GATEWAY_GRPC_LISTEN": "127.0.0.1:1", "GATEWAY_SYMBOLIZE_TIMEOUT": "250ms", "GATEWAY_OTLP_HEADER": "x=1,y=2",
		"GATEWAY_PPROF_DIR": "/tmp/p", "GATEWAY_SYMBOLIZE_CONCURRENCY": "9",
	})
	if c.GRPCListen != "127.0.0.1:1" || c.SymbolizeTimeout != 250*time.Millisecond || c.OTLPHeader["y"] != "2" ||
		c.PprofDir != "/tmp/p" || c.SymbolizeConcurrency != 9 {
		t.Fatalf("environment: %+v", c)
	}
}
