// Command gochain is the Go workload the cluster's end-to-end test profiles: a known call chain
// (main.main -> main.run -> main.outer -> main.middle -> main.leaf) that spins on the CPU until
// stopped, with DWARF and Go's frame pointers.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

var sink uint64

//go:noinline
func leaf(n uint64) uint64 {
	x := n
	for i := 0; i < 1_000_000; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

//go:noinline
func middle(n uint64) uint64 { return leaf(n+1) ^ n }

//go:noinline
func outer(n uint64) uint64 { return middle(n*3) + 1 }

//go:noinline
func run(stop <-chan os.Signal) {
	for n := uint64(0); ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		sink += outer(n)
	}
}

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	fmt.Println("gochain: spinning in main.run -> main.outer -> main.middle -> main.leaf")
	run(stop)
	fmt.Println("gochain: stopped", sink != 0)
}
