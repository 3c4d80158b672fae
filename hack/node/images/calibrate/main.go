// calibrate: the benchmark of `workload-resizer calibrate`. One thread runs three small CPU
// kernels (integer hashing, a floating-point recurrence, a pointer chase through a table that
// fits in the L2 cache), each for a fixed wall time, and prints one JSON line
//
//	{"score": <geometric mean of the kernels' work per wall second>, "kernels": {...}, ...}
//
// to stdout and to the termination message file (/dev/termination-log), so the score can be
// read from the pod's status without a connection to the kubelet. Work per WALL second: a CPU
// quota or a slower core both lower it, as both lower what a millicore buys on that node.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"syscall"
	"time"
)

// Each kernel runs in rounds of fixed work; the clock is read once per round.
const (
	hashRound  = 1 << 16
	floatRound = 1 << 16
	chaseRound = 1 << 16
	chaseSlots = 1 << 13 // 8192 x 8 bytes = 64 KiB
)

var sink uint64 // keeps the compiler from removing the kernels' work

func hashKernel(n int, state uint64) uint64 {
	for i := 0; i < n; i++ { // splitmix64
		state += 0x9e3779b97f4a7c15
		z := state
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		state ^= z ^ (z >> 31)
	}
	return state
}

func floatKernel(n int, x float64) float64 {
	for i := 0; i < n; i++ {
		x = x*1.0000001 + 0.5/(x+1.0)
		if x > 1e6 {
			x = math.Sqrt(x)
		}
	}
	return x
}

// chaseTable is one random cycle through all slots (Sattolo's algorithm, fixed seed).
func chaseTable() []uint32 {
	next := make([]uint32, chaseSlots)
	for i := range next {
		next[i] = uint32(i)
	}
	seed := uint64(42)
	for i := chaseSlots - 1; i > 0; i-- {
		seed = seed*6364136223846793005 + 1442695040888963407
		j := int((seed >> 33) % uint64(i))
		next[i], next[j] = next[j], next[i]
	}
	return next
}

func chaseKernel(n int, next []uint32, at uint32) uint32 {
	for i := 0; i < n; i++ {
		at = next[at]
	}
	return at
}

// run calls round (which does `work` operations) until `d` of wall time has passed; it
// returns operations per wall second.
func run(d time.Duration, work int, round func()) float64 {
	start := time.Now()
	rounds := 0
	for {
		round()
		rounds++
		if elapsed := time.Since(start); elapsed >= d {
			return float64(rounds) * float64(work) / elapsed.Seconds()
		}
	}
}

func cpuSeconds() float64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		return 0
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano()).Seconds()
}

func main() {
	each := flag.Duration("duration", 2*time.Second, "wall time per kernel")
	out := flag.String("termination-log", "/dev/termination-log", "also write the result line here (empty: don't)")
	flag.Parse()
	runtime.GOMAXPROCS(1)
	runtime.LockOSThread()

	next := chaseTable()
	var h uint64 = 1
	x := 1.0
	var at uint32
	startWall, startCPU := time.Now(), cpuSeconds()
	kernels := map[string]float64{
		"hash":  run(*each, hashRound, func() { h = hashKernel(hashRound, h) }),
		"float": run(*each, floatRound, func() { x = floatKernel(floatRound, x) }),
		"chase": run(*each, chaseRound, func() { at = chaseKernel(chaseRound, next, at) }),
	}
	wall, cpu := time.Since(startWall).Seconds(), cpuSeconds()-startCPU
	sink = h ^ uint64(x) ^ uint64(at)

	product := 1.0
	for _, rate := range kernels {
		product *= rate / 1e6
	}
	result := map[string]any{
		"score":       math.Cbrt(product), // geometric mean, in millions of operations per wall second
		"kernels":     kernels,
		"wallSeconds": wall,
		// CPU time over wall time: below 1 when a quota or other load held the thread back.
		"cpuShare": cpu / wall,
	}
	line, err := json.Marshal(result)
	if err != nil {
		fmt.Fprintln(os.Stderr, "calibrate:", err)
		os.Exit(1)
	}
	if *out != "" {
		if err := os.WriteFile(*out, append(line, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "calibrate: termination log:", err) // the log line below still carries it
		}
	}
	fmt.Println(string(line))
}
