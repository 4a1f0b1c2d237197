package teststack

import (
	"fmt"
	"net"
	"net/http"
	"time"
)

// HTTPOK returns a readiness check (for WaitReady) that wants 200 from a
// GET of url.
func HTTPOK(url string) func() error {
	client := &http.Client{Timeout: 2 * time.Second}
	return func() error {
		resp, err := client.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}
}

// TCPListening returns a readiness check that wants addr to accept a
// connection.
func TCPListening(addr string) func() error {
	return func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	}
}

// WaitPortsFree waits (bounded) until every port can be bound on
// 127.0.0.1: a port held by someone else is waited for, never taken from
// them, and the error names it if it stays busy.
func WaitPortsFree(ports []int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		busy := -1
		for _, p := range ports {
			ln, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				busy = p
				break
			}
			ln.Close()
		}
		if busy < 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("port 127.0.0.1:%d still in use after %v", busy, timeout)
		}
		time.Sleep(time.Second)
	}
}
