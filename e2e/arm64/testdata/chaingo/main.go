// Command chaingo is a Go workload: Go keeps frame pointers on arm64, and the collector walks
// Go code by them.
package main

import (
	"os"
	"strconv"
	"time"
)

var sink uint64

//go:noinline
func leaf(x uint64) uint64 {
	for i := 0; i < 200000; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

//go:noinline
func middle(x uint64) uint64 {
	r := leaf(x)
	return r ^ (x + 1)
}

func main() {
	secs := 30
	if len(os.Args) > 1 {
		secs, _ = strconv.Atoi(os.Args[1])
	}
	end := time.Now().Add(time.Duration(secs) * time.Second)
	for i := uint64(0); time.Now().Before(end); i++ {
		sink += middle(i)
	}
}
