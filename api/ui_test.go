package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/wstream/wstream/api"
	"github.com/wstream/wstream/coordinator"
	"github.com/wstream/wstream/internal/testkit/testmod"
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

// TestUIDeployPlotsRescaleStop drives the page as a user would: deploys
// a module through its form (POST /v1/jobs), sees the job's plots draw
// from live data, selects the job id and keeps the selection across
// refreshes (the page is patched in place, not rebuilt), rescales the job
// through its form (POST /v1/jobs/{id}/rescale) and stops it with a
// savepoint; the page throws nothing.
func TestUIDeployPlotsRescaleStop(t *testing.T) {
	_, u, _ := startCluster(t)
	mod := testmod.GoModule(t, "examples/wasm/go/mapfilter")
	planPath := filepath.Join(t.TempDir(), "plan.json")
	if err := os.WriteFile(planPath, []byte(endlessPlan), 0o644); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t)
	if err := b.do(chromedp.Navigate(u + "/")); err != nil {
		t.Fatal(err)
	}
	b.waitJS(time.Minute, "the deploy form", `document.getElementById("deploy-form") !== null`)
	b.click(`(document.getElementById("deploy").open = true, document.getElementById("deploy"))`)
	if err := b.do(chromedp.SetUploadFiles(`#deploy-module`, []string{mod}, chromedp.NodeReady),
		chromedp.SetUploadFiles(`#deploy-plan`, []string{planPath}, chromedp.NodeReady)); err != nil {
		t.Fatal(err)
	}
	if _, err := eval[bool](b, `document.getElementById("deploy-name").value = "from-the-ui", document.getElementById("deploy-form").requestSubmit(), true`); err != nil {
		t.Fatal(err)
	}
	b.waitJS(2*time.Minute, "the deployed job's page", `location.hash.startsWith("#/jobs/") && document.querySelector("#job[data-job]") !== null`)
	id, err := eval[string](b, `document.querySelector("#job").dataset.job`)
	if err != nil {
		t.Fatal(err)
	}
	if d := get(t, u+"/v1/jobs/"+id); str(d, "name") != "from-the-ui" || str(d, "module") != "mapfilter.wasm" {
		t.Fatalf("the job the page deployed: %v", d)
	}

	// Plots draw from live data: several samples of records in and out
	// and of backpressure, and checkpoints' duration and size.
	for _, p := range []string{"plot-in", "plot-out", "plot-bp"} {
		b.waitJS(time.Minute, p+" drawn", fmt.Sprintf(`Array.from(document.querySelectorAll("#%s path.line")).some((l) => Number(l.dataset.points) >= 3)`, p))
	}
	for _, p := range []string{"plot-ckpt-duration", "plot-ckpt-size"} {
		b.waitJS(time.Minute, p+" drawn", fmt.Sprintf(`Array.from(document.querySelectorAll("#%s path.line")).some((l) => Number(l.dataset.points) >= 2)`, p))
	}
	// Every line of text of a graph node, "busy 100%" included, fits in
	// its box.
	b.waitJS(10*time.Second, "the nodes' texts inside their boxes", `Array.from(document.querySelectorAll("#graph-svg g.node")).every((g) => {
		const w = Number(g.querySelector("rect").getAttribute("width"));
		return Array.from(g.querySelectorAll("text")).every((t) => { const bb = t.getBBox(); return bb.x + bb.width <= w; });
	})`)
	b.waitJS(10*time.Second, "records flowing in the plot", `document.querySelector("#plot-out .legend").textContent.match(/src [1-9]/) !== null`)

	// Select the job id, as a user would to copy it; the page refreshes
	// twice and the selection, and the very node, stay.
	if _, err := eval[bool](b, `(() => {
		const el = document.getElementById("job-id");
		el.marker = "kept";
		const r = document.createRange();
		r.selectNodeContents(el);
		const s = window.getSelection();
		s.removeAllRanges();
		s.addRange(r);
		window.refreshedAt = document.getElementById("conn").textContent;
		return true;
	})()`); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		b.waitJS(30*time.Second, "a refresh", `(() => { const c = document.getElementById("conn").textContent; if (c === window.refreshedAt) return false; window.refreshedAt = c; return true; })()`)
	}
	sel, err := eval[string](b, `window.getSelection().toString() + "|" + document.getElementById("job-id").marker`)
	if err != nil {
		t.Fatal(err)
	}
	if sel != id+"|kept" {
		t.Fatalf("after two refreshes the selection and the node's mark are %q, want %q", sel, id+"|kept")
	}
	// Copy it with the keyboard: the copy event carries the job id.
	if _, err := eval[bool](b, `document.addEventListener("copy", () => { window.copied = window.getSelection().toString(); }), true`); err != nil {
		t.Fatal(err)
	}
	if err := b.do(chromedp.KeyEvent("c", chromedp.KeyModifiers(chromedp.ModifierCtrl))); err != nil {
		t.Fatal(err)
	}
	b.waitJS(10*time.Second, "the job id copied", fmt.Sprintf(`window.copied === %q`, id))

	// Rescale src+upper from 2 to 3 through the page's form.
	if _, err := eval[bool](b, `document.getElementById("rescale-parallelism").value = "3", document.getElementById("rescale-form").requestSubmit(), true`); err != nil {
		t.Fatal(err)
	}
	b.waitJS(3*time.Minute, "the rescale to complete", `document.getElementById("rescale-status").dataset.status === "COMPLETED"`)
	b.waitJS(time.Minute, "src at parallelism 3 in the graph", `document.querySelector('#graph-svg g.node[data-vertex="src"]').textContent.includes("p=3")`)
	if d := get(t, u+"/v1/jobs/"+id); num(d, "tasks.total") != 4 || str(d, "state") != "RUNNING" {
		t.Fatalf("after the rescale: %v", d)
	}

	// Stop with a savepoint; the header then says how long it ran.
	if _, err := eval[bool](b, `window.confirm = () => true, true`); err != nil {
		t.Fatal(err)
	}
	b.click(`document.getElementById("stop-job")`)
	b.waitJS(2*time.Minute, "the job stopped", `document.querySelector("#job [data-state]").dataset.state === "FINISHED"`)
	b.waitJS(30*time.Second, "the stop's savepoint", `document.getElementById("savepoint-status").dataset.status === "COMPLETED"`)
	header, err := eval[string](b, `document.getElementById("job-header").textContent`)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(header, "running for") || !strings.Contains(header, "ran for") {
		t.Fatalf("a finished job's header: %q", header)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.thrown) > 0 {
		t.Fatalf("the page threw:\n%s", strings.Join(b.thrown, "\n"))
	}
}
