// Command loadgen drives an HTTPS admission webhook with one AdmissionReview:
// N keep-alive TLS connections (HTTP/1.1, one worker goroutine per connection,
// each request waits for the previous response), a warm-up, then a fixed
// measurement window. Prints one JSON object: reviews/s, latency percentiles,
// errors.
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

type result struct {
	URL         string  `json:"url"`
	Connections int     `json:"connections"`
	DurationS   float64 `json:"duration_s"`
	Requests    int     `json:"requests"`
	Errors      int64   `json:"errors"`
	RPS         float64 `json:"rps"`
	P50ms       float64 `json:"p50_ms"`
	P90ms       float64 `json:"p90_ms"`
	P99ms       float64 `json:"p99_ms"`
	P999ms      float64 `json:"p999_ms"`
	MaxMs       float64 `json:"max_ms"`
	FirstError  string  `json:"first_error,omitempty"`
}

func pct(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p * float64(len(sorted)-1))
	return float64(sorted[i].Microseconds()) / 1000
}

func main() {
	url := flag.String("url", "https://127.0.0.1:8443/mutate", "webhook URL")
	caFile := flag.String("cacert", "ca.crt", "CA bundle to verify the server with")
	bodyFile := flag.String("body", "review.json", "AdmissionReview to POST")
	conns := flag.Int("c", 16, "concurrent connections")
	warmup := flag.Duration("warmup", 2*time.Second, "warm-up (not measured)")
	duration := flag.Duration("d", 10*time.Second, "measurement window")
	flag.Parse()

	body, err := os.ReadFile(*bodyFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	caPEM, err := os.ReadFile(*caFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		fmt.Fprintln(os.Stderr, "no certificate in", *caFile)
		os.Exit(2)
	}

	var measuring atomic.Bool
	var stop atomic.Bool
	var errs atomic.Int64
	var firstErr atomic.Value
	lat := make([][]time.Duration, *conns)
	var wg sync.WaitGroup
	for i := 0; i < *conns; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			tr := &http.Transport{
				TLSClientConfig:     &tls.Config{RootCAs: pool, NextProtos: []string{"http/1.1"}},
				TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{},
				MaxIdleConnsPerHost: 1,
				MaxConnsPerHost:     1,
				DisableCompression:  true,
			}
			client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			local := make([]time.Duration, 0, 1<<16)
			for !stop.Load() {
				t0 := time.Now()
				resp, err := client.Post(*url, "application/json", bytes.NewReader(body))
				ok := err == nil
				if ok {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					ok = err == nil && resp.StatusCode == 200
					if err == nil && resp.StatusCode != 200 {
						err = fmt.Errorf("HTTP %d", resp.StatusCode)
					}
				}
				d := time.Since(t0)
				if measuring.Load() {
					if ok {
						local = append(local, d)
					} else {
						errs.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
					}
				}
			}
			lat[i] = local
		}(i)
	}
	time.Sleep(*warmup)
	measuring.Store(true)
	t0 := time.Now()
	time.Sleep(*duration)
	measuring.Store(false)
	elapsed := time.Since(t0)
	stop.Store(true)
	wg.Wait()

	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	sort.Slice(all, func(a, b int) bool { return all[a] < all[b] })
	r := result{
		URL: *url, Connections: *conns, DurationS: elapsed.Seconds(), Requests: len(all), Errors: errs.Load(),
		RPS:   float64(len(all)) / elapsed.Seconds(),
		P50ms: pct(all, 0.50), P90ms: pct(all, 0.90), P99ms: pct(all, 0.99), P999ms: pct(all, 0.999),
	}
	if len(all) > 0 {
		r.MaxMs = float64(all[len(all)-1].Microseconds()) / 1000
	}
	if v := firstErr.Load(); v != nil {
		r.FirstError = v.(string)
	}
	json.NewEncoder(os.Stdout).Encode(r)
}
