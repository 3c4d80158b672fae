// workload: a test container. Sleeps (or burns CPU with -burn N busy goroutines, holds
// -hold-mib MiB of touched memory) and prints the CPU and memory limits of its own cgroup
// whenever they change (cgroup v1 or v2).
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

var files = []string{
	"/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us",
	"/sys/fs/cgroup/cpu/cpu.shares", "/sys/fs/cgroup/memory/memory.limit_in_bytes",
	"/sys/fs/cgroup/cpu.max", "/sys/fs/cgroup/cpu.weight", "/sys/fs/cgroup/memory.max",
}

func limits() string {
	var parts []string
	for _, f := range files {
		if data, err := os.ReadFile(f); err == nil {
			parts = append(parts, fmt.Sprintf("%s=%s", strings.TrimPrefix(f, "/sys/fs/cgroup/"), strings.TrimSpace(string(data))))
		}
	}
	return strings.Join(parts, " ")
}

func main() {
	burn := flag.Int("burn", 0, "busy goroutines to run")
	every := flag.Duration("interval", 2*time.Second, "how often to check the cgroup limits")
	holdMiB := flag.Int("hold-mib", 0, "MiB of memory to allocate, touch and keep")
	flag.Parse()
	held := make([]byte, *holdMiB<<20)
	for i := 0; i < len(held); i += 4096 {
		held[i] = 1
	}
	fmt.Printf("holding %d MiB\n", len(held)>>20)
	for i := 0; i < *burn; i++ {
		go func() {
			for {
			}
		}()
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	last := ""
	tick := time.NewTicker(*every)
	for {
		if now := limits(); now != last {
			fmt.Printf("%s cgroup %s\n", time.Now().UTC().Format(time.RFC3339), now)
			last = now
		}
		select {
		case <-stop:
			fmt.Println("stopping", len(held)>>20)
			return
		case <-tick.C:
		}
	}
}
