package testsupport

import (
	"net"
	"os"
	"testing"
)

func TestListeningInodes(t *testing.T) {
	const table = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1111 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 2222 1 0000000000000000 20 4 30 10 -1
   2: 00000000:1F91 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3333 1 0000000000000000 100 0 0 10 0
`
	tests := []struct {
		name    string
		table   string
		port    int
		want    []string
		wantErr bool
	}{
		{"listener on port", table, 0x1f90, []string{"1111"}, false},
		{"other port", table, 0x1f91, []string{"3333"}, false},
		{"no listener", table, 80, nil, false},
		{"header only", "  sl  local_address\n", 80, nil, false},
		{"short row", "hdr\n 0: 0100007F:1F90 00000000:0000 0A\n", 80, nil, true},
		{"bad port", "hdr\n 0: 0100007F:ZZZZ 00000000:0000 0A a b c d e 9\n", 80, nil, true},
		{"no port", "hdr\n 0: 0100007F 00000000:0000 0A a b c d e 9\n", 80, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := map[string]bool{}
			err := listeningInodes([]byte(tt.table), tt.port, got)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("inodes %v, want %v", got, tt.want)
			}
			for _, w := range tt.want {
				if !got[w] {
					t.Fatalf("inodes %v lack %s", got, w)
				}
			}
		})
	}
}

func TestOwnsListener(t *testing.T) {
	var lc net.ListenConfig
	l, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if ok, err := ownsListener(os.Getpid(), port); err != nil || !ok {
		t.Fatalf("ownsListener(self, %d) = %v, %v; want true", port, ok, err)
	}
	// PID 1 is not this test and does not hold our socket.
	if ok, err := ownsListener(1, port); err != nil || ok {
		t.Fatalf("ownsListener(1, %d) = %v, %v; want false", port, ok, err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("close listener: %v", err)
	}
	if ok, err := ownsListener(os.Getpid(), port); err != nil || ok {
		t.Fatalf("ownsListener after close = %v, %v; want false", ok, err)
	}
}
