package teststack

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
)

// Fetch sends one request with client (http.DefaultClient when nil), a
// JSON body when body is not empty, and reads the response to its end: a
// stream is over on the wire when Fetch returns.
func Fetch(client *http.Client, method, url, body string) error {
	return fetch(client, method, url, body, io.Discard)
}

// FetchEvents is Fetch that also returns when each SSE data event but
// [DONE] reached the client (MonotonicNow), stamped as the read of the
// body that completes it returns: the arrivals ChunkRange reasons from.
func FetchEvents(client *http.Client, method, url, body string) ([]uint64, error) {
	var e eventStamps
	err := fetch(client, method, url, body, &e)
	return e.eventNS, err
}

func fetch(client *http.Client, method, url, body string, out io.Writer) error {
	if client == nil {
		client = http.DefaultClient
	}
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(out, resp.Body)
	return err
}

// FetchAll runs n Fetches at once and returns their errors joined.
func FetchAll(client *http.Client, n int, method, url, body string) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = Fetch(client, method, url, body) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
