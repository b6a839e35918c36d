package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/wstream/wstream/api"
	"github.com/wstream/wstream/coordinator"
)

// chromium finds the browser scripts/setup.sh installs (Debian's chromium).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium on PATH: run scripts/setup.sh (it installs Debian's chromium package)")
	return ""
}

// browser drives one headless Chromium tab; exceptions the page throws
// are collected.
type browser struct {
	t      *testing.T
	ctx    context.Context
	mu     sync.Mutex
	thrown []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless,
		chromedp.DisableGPU,
		// Tests may run as root, where Chromium's sandbox cannot start.
		chromedp.NoSandbox,
		chromedp.WindowSize(1400, 1000),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	b := &browser{t: t, ctx: ctx}
	// The first call starts the browser, for the life of ctx: no timeout.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleException {
				b.mu.Lock()
				b.thrown = append(b.thrown, m.Text)
				b.mu.Unlock()
			}
		}
	}()
	return b
}

// do runs actions with a deadline.
func (b *browser) do(actions ...chromedp.Action[chromedp.Void]) error {
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	return chromedp.Do(ctx, actions...)
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](b *browser, expr string) (T, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](expr))
}

// waitJS polls a boolean expression until it is true.
func (b *browser) waitJS(d time.Duration, what, expr string) {
	b.t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, err := eval[bool](b, expr)
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			body, _ := eval[string](b, `document.getElementById("main").innerText`)
			b.t.Fatalf("timed out after %s waiting for %s (last error %v); the page says:\n%s", d, what, err, body)
		}
		time.Sleep(100 * time.Millisecond) // polling interval
	}
}

// click clicks the element an expression yields, in the page itself: the
// page redraws every second, and a click from outside could land on an
// element that has just been replaced.
func (b *browser) click(elem string) {
	b.t.Helper()
	if _, err := eval[bool](b, "("+elem+").click(), true"); err != nil {
		b.t.Fatalf("clicking %s: %v", elem, err)
	}
}

// TestUIInChromium opens the web UI in a headless Chromium against the
// embedded default running an unbounded job that checkpoints every 200
// ms: the job shows up in the list, its page shows the graph, its
// checkpoints appear and their count grows, a checkpoint's details open,
// and a savepoint triggered with the page's button completes.
func TestUIInChromium(t *testing.T) {
	e, u, _ := startCluster(t)
	id := submit(t, e, endlessPlan)
	b := newBrowser(t)

	if err := b.do(chromedp.Navigate(u + "/")); err != nil {
		t.Fatal(err)
	}
	jobLink := fmt.Sprintf(`document.querySelector('a.job-link[data-job=%q]')`, id)
	b.waitJS(time.Minute, "the job in the list", jobLink+` !== null`)
	b.waitJS(time.Minute, "the job running in the list", `(() => { const a = `+jobLink+`; return a !== null && a.closest("tr").querySelector("[data-state]").dataset.state === "RUNNING"; })()`)
	b.waitJS(10*time.Second, "the live workers card", `document.getElementById("ov-workers") !== null && document.getElementById("ov-workers").textContent === "1"`)

	// Open the job as a user would, by its link.
	b.click(jobLink)
	b.waitJS(time.Minute, "the job's page", fmt.Sprintf(`document.querySelector('#job[data-job=%q]') !== null`, id))
	for _, v := range []string{"src", "upper", "out"} {
		b.waitJS(10*time.Second, "vertex "+v+" in the graph", fmt.Sprintf(`document.querySelector('#graph-svg g.node[data-vertex=%q]') !== null`, v))
	}
	b.waitJS(10*time.Second, "two edges in the graph", `document.querySelectorAll('#graph-svg path.edge').length === 2`)

	// Checkpoints appear, and their count grows.
	completed := `document.getElementById("ckpt-completed") ? document.getElementById("ckpt-completed").textContent : "-1"`
	b.waitJS(time.Minute, "a completed checkpoint", `Number(`+completed+`) >= 1`)
	first, err := eval[string](b, completed)
	if err != nil {
		t.Fatal(err)
	}
	b.waitJS(time.Minute, "more completed checkpoints", fmt.Sprintf(`Number(%s) > %s`, completed, first))
	b.waitJS(10*time.Second, "the checkpoint history", `document.querySelectorAll('#ckpt-history tr[data-checkpoint]').length >= 1`)

	// A checkpoint's details by subtask.
	cid, err := eval[string](b, `(() => { const r = document.querySelector('#ckpt-history tr[data-checkpoint][data-status="completed"]'); r.click(); return r.dataset.checkpoint; })()`)
	if err != nil {
		t.Fatal(err)
	}
	b.waitJS(30*time.Second, "checkpoint "+cid+"'s details", fmt.Sprintf(`document.querySelector('#ckpt-detail[data-checkpoint=%q]') !== null && document.querySelectorAll('#ckpt-detail tbody tr').length === 3`, cid))

	// Trigger a savepoint from the page and wait for it to complete. The
	// page redraws every second: click again if the request did not go.
	deadline := time.Now().Add(time.Minute)
	for {
		b.click(`document.getElementById("trigger-savepoint")`)
		var sent bool
		for i := 0; i < 50 && !sent; i++ {
			sent, _ = eval[bool](b, `(() => { const s = document.getElementById("savepoint-status"); return s !== null && !!s.dataset.request; })()`)
			if !sent {
				time.Sleep(100 * time.Millisecond) // polling interval
			}
		}
		if sent {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the savepoint button sent no request")
		}
	}
	b.waitJS(time.Minute, "the savepoint to complete", `document.getElementById("savepoint-status").dataset.status === "COMPLETED"`)
	text, err := eval[string](b, `document.getElementById("savepoint-status").textContent`)
	if err != nil {
		t.Fatal(err)
	}
	// The page and the API agree on which savepoint completed.
	ck := get(t, u+"/v1/jobs/"+id+"/checkpoints")
	spID := int(num(ck, "latest.savepoint.id"))
	if spID == 0 || !strings.Contains(text, fmt.Sprintf("savepoint %d: COMPLETED", spID)) || !strings.Contains(text, "savepoint-"+id) {
		t.Fatalf("the page says %q; the API's latest savepoint is %v", text, field(ck, "latest.savepoint"))
	}
	b.waitJS(30*time.Second, "the savepoint in the overview", fmt.Sprintf(`document.getElementById("checkpoints").innerText.includes("latest savepoint\t%d")`, spID))

	// The workers page.
	b.click(`document.getElementById("nav-workers")`)
	b.waitJS(30*time.Second, "the workers page", `document.querySelector("#workers tbody td") !== null && document.querySelector("#workers tbody td").textContent === "w0"`)

	// The job is still running: the page acted only when asked.
	if st := str(get(t, u+"/v1/jobs/"+id), "state"); st != "RUNNING" {
		t.Fatalf("the job is %s", st)
	}
	res, err := http.Get(u + "/app.js")
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("app.js: %v", err)
	}
	res.Body.Close()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.thrown) > 0 {
		t.Fatalf("the page threw:\n%s", strings.Join(b.thrown, "\n"))
	}
}

// TestUILogin: with tokens, the page asks for one, says when it is
// refused, and shows each caller its own view: the admin the job and the
// workers, a tenant neither.
func TestUILogin(t *testing.T) {
	e, _, _ := startCluster(t)
	id := submit(t, e, endlessPlan)
	s, err := api.New(api.Config{Coordinator: e.Coordinator(), Auth: func(tok string) (coordinator.Caller, bool) {
		switch tok {
		case "admin.secret":
			return coordinator.Caller{}, true
		case "acme.secret":
			return coordinator.Caller{Tenant: "acme"}, true
		}
		return coordinator.Caller{}, false
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	b := newBrowser(t)
	if err := b.do(chromedp.Navigate(srv.URL + "/")); err != nil {
		t.Fatal(err)
	}
	b.waitJS(time.Minute, "the token form", `!document.getElementById("login").hidden`)
	signIn := func(tok string) {
		t.Helper()
		if _, err := eval[bool](b, fmt.Sprintf(`document.getElementById("token").value = %q; document.getElementById("login-form").requestSubmit(), true`, tok)); err != nil {
			t.Fatal(err)
		}
	}
	signIn("acme.wrong")
	b.waitJS(30*time.Second, "the refusal", `!document.getElementById("login").hidden && document.getElementById("login-error").textContent.includes("Bearer")`)

	signIn("admin.secret")
	b.waitJS(time.Minute, "the admin's job list", fmt.Sprintf(`document.querySelector('a.job-link[data-job=%q]') !== null && !document.getElementById("nav-workers").hidden`, id))

	// Sign out, and in again as tenant acme.
	b.click(`document.getElementById("sign-out")`)
	b.waitJS(30*time.Second, "the token form again", `!document.getElementById("login").hidden && localStorage.getItem("wstream-token") === null`)
	signIn("acme.secret")
	b.waitJS(time.Minute, "acme's empty job list", `document.querySelector("#jobs") !== null && document.querySelector("#jobs tbody").innerText.includes("no jobs") && document.getElementById("nav-workers").hidden && document.getElementById("who-name").textContent === "signed in as acme"`)
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.thrown) > 0 {
		t.Fatalf("the page threw:\n%s", strings.Join(b.thrown, "\n"))
	}
}
