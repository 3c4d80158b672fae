// workload: a test container. Sleeps (or burns CPU with -burn N busy goroutines, or its share
// of a workload's fixed CPU load with -load-millicores, holds -hold-mib MiB of touched memory)
// and prints the CPU and memory limits of its own cgroup whenever they change (cgroup v1 or v2).
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

const (
	heartbeat = time.Second
	// A member whose file is older than this is gone (killed before it could remove it).
	memberTimeout = 3 * heartbeat
	// CPU time owed after the machine took the CPU away is made up later, up to this much.
	maxDebt = 250 * time.Millisecond
)

var sink uint64 // keeps the compiler from removing the busy loop's work

// cpuTime is the CPU time the whole process has used (every thread, user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// liveMembers counts the heartbeat files in dir touched within memberTimeout (at least 1: this one).
func liveMembers(dir string, now time.Time) int {
	entries, _ := os.ReadDir(dir)
	n := 0
	for _, e := range entries {
		if info, err := e.Info(); err == nil && now.Sub(info.ModTime()) < memberTimeout {
			n++
		}
	}
	return max(n, 1)
}

// shareLoad burns millicores of CPU time per second for the whole workload, spread evenly over
// its live pods: each keeps a heartbeat file in a directory they share (a hostPath) and burns
// millicores / (live files). A fixed total load, as requests spread over a Service's pods: an
// autoscaler that adds a pod lowers every pod's usage. Paced by the process's own CPU clock, not
// by wall time, so the usage is what was asked for on a busy machine too (time the machine takes
// away is made up later, up to maxDebt); the process's other work counts towards it.
func shareLoad(member string, millicores int, leaving *atomic.Bool) {
	dir := filepath.Dir(member)
	members, owed := 1, time.Duration(0)
	var beat time.Time
	last, used := time.Now(), cpuTime()
	for !leaving.Load() {
		now := time.Now()
		if now.Sub(beat) >= heartbeat {
			if err := os.WriteFile(member, nil, 0o644); err == nil {
				_ = os.Chtimes(member, now, now)
			}
			members, beat = liveMembers(dir, now), now
		}
		owed += now.Sub(last) * time.Duration(millicores) / time.Duration(1000*members)
		last = now
		spent := cpuTime()
		owed = min(max(owed-(spent-used), -maxDebt), maxDebt)
		used = spent
		for end := used + owed; owed > 0 && cpuTime() < end; {
			for i := 0; i < 20000; i++ {
				sink = sink*6364136223846793005 + 1442695040888963407
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

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
	loadMillicores := flag.Int("load-millicores", 0, "CPU millicores the whole workload burns, spread over its live pods")
	loadDir := flag.String("load-dir", "", "-load-millicores: the directory the workload's pods share")
	loadMember := flag.String("load-member", "", "-load-millicores: this pod's heartbeat file in -load-dir (its name)")
	flag.Parse()
	var leaving atomic.Bool
	member := ""
	if *loadMillicores > 0 {
		if *loadDir == "" || *loadMember == "" {
			fmt.Fprintln(os.Stderr, "-load-millicores needs -load-dir and -load-member")
			os.Exit(2)
		}
		member = filepath.Join(*loadDir, *loadMember)
		fmt.Printf("burning %dm shared with the live members of %s\n", *loadMillicores, *loadDir)
		go shareLoad(member, *loadMillicores, &leaving)
	}
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
			if member != "" { // the others take over this one's share at once
				leaving.Store(true)
				_ = os.Remove(member)
			}
			return
		case <-tick.C:
		}
	}
}
