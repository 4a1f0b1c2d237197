package streamagg

import "testing"

func TestRoutes(t *testing.T) {
	r, err := newRouter([]string{"/v1/models/{model}:generate", "/api/{kind}/stream"})
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"/v1/chat/completions":   "/v1/chat/completions",
		"/":                      "/",
		"/v1/threads/12345/runs": "/v1/threads/{id}/runs",
		"/v1/files/0f8fad5b-d9cb-469f-a165-70867728950e": "/v1/files/{id}",
		"/blobs/0123456789abcdef0123":                    "/blobs/{id}",
		"/blobs/0123456789abcde":                         "/blobs/0123456789abcde", // 15 hex digits: kept
		"/v1/models/llama:generate":                      "/v1/models/{model}:generate",
		"/api/chat/stream":                               "/api/{kind}/stream",
		"/api/chat/stream/more":                          "/api/chat/stream/more",
		"/api//stream":                                   "/api//stream", // a wildcard matches one non-empty segment
		"/v2/x/":                                         "/v2/x/",
		"/v2/42/":                                        "/v2/{id}/",
	} {
		if got := string(r.route([]byte(path))); got != want {
			t.Errorf("route(%q) = %q, want %q", path, got, want)
		}
	}
	if err := ValidateRoutes([]string{"v1/x"}); err == nil {
		t.Error("a route without a leading / was accepted")
	}
}

func TestRoutingAllocatesNothing(t *testing.T) {
	r, _ := newRouter([]string{"/v1/models/{model}:generate"})
	paths := [][]byte{[]byte("/v1/threads/12345/runs"), []byte("/v1/models/x:generate")}
	if n := testing.AllocsPerRun(100, func() {
		for _, p := range paths {
			r.route(p)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per run", n)
	}
}
