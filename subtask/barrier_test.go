package subtask

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestBarrierScenarios runs the scenario files under testdata/barrier. Each
// file drives one Handler (or several, one per "new") with commands and
// prints the actions of Ready after each:
//
//	new channels=3 mode=aligned timeout=0
//	barrier ch=0 id=1 now=10 [kind=savepoint]
//	data ch=1 bytes=100
//	cancel ch=2 id=1 [now=20]
//	end ch=1 [now=30]
//	tick now=50
//	abort id=1 [reason=(checkpoint expired)]
//	pending
//
// Run with -rewrite to regenerate the expected output, then review the diff.
func TestBarrierScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/barrier", func(t *testing.T, path string) {
		var h *Handler
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "new" && h == nil {
				d.Fatalf(t, "%s before new", d.Cmd)
			}
			var ch int
			var id, now int64
			switch d.Cmd {
			case "new":
				var cfg HandlerConfig
				var mode string
				d.ScanArgs(t, "channels", &cfg.Channels)
				d.ScanArgs(t, "mode", &mode)
				d.MaybeScanArgs(t, "timeout", &cfg.AlignedTimeout)
				m, err := ParseMode(mode)
				if err != nil {
					return "error: " + err.Error() + "\n"
				}
				cfg.Mode = m
				nh, err := NewHandler(cfg)
				if err != nil {
					return "error: " + err.Error() + "\n"
				}
				h = nh
				return "ok\n"
			case "barrier":
				kind := KindCheckpoint
				if d.HasArg("kind") {
					var k string
					d.ScanArgs(t, "kind", &k)
					switch k {
					case "checkpoint":
					case "savepoint":
						kind = KindSavepoint
					default:
						d.Fatalf(t, "unknown kind %q", k)
					}
				}
				d.ScanArgs(t, "ch", &ch)
				d.ScanArgs(t, "id", &id)
				d.ScanArgs(t, "now", &now)
				if err := h.Barrier(now, ch, id, kind); err != nil {
					return "error: " + err.Error() + "\n" + formatHandlerActions(h.Ready())
				}
			case "data":
				var n int
				d.ScanArgs(t, "ch", &ch)
				d.ScanArgs(t, "bytes", &n)
				h.Data(ch, n)
			case "cancel":
				d.ScanArgs(t, "ch", &ch)
				d.ScanArgs(t, "id", &id)
				d.MaybeScanArgs(t, "now", &now)
				h.Cancel(now, ch, id)
			case "end":
				d.ScanArgs(t, "ch", &ch)
				d.MaybeScanArgs(t, "now", &now)
				h.End(now, ch)
			case "tick":
				d.ScanArgs(t, "now", &now)
				h.Tick(now)
			case "abort":
				d.ScanArgs(t, "id", &id)
				reason := "aborted by the coordinator"
				if arg, ok := d.Arg("reason"); ok {
					reason = strings.Join(arg.Vals, ", ")
				}
				h.Abort(id, reason)
			case "pending":
				if id, ok := h.Pending(); ok {
					return fmt.Sprintf("pending id=%d\n", id)
				}
				return "nothing pending\n"
			default:
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			return formatHandlerActions(h.Ready())
		})
	})
}

func formatHandlerActions(actions []HandlerAction) string {
	if len(actions) == 0 {
		return "(no actions)\n"
	}
	var b strings.Builder
	for _, a := range actions {
		b.WriteString(a.String())
		b.WriteByte('\n')
	}
	return b.String()
}

func TestParseMode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Mode
	}{
		{"exactly-once", ExactlyOnce},
		{"aligned", ExactlyOnce},
		{"at-least-once", AtLeastOnce},
		{"unaligned", Unaligned},
	} {
		got, err := ParseMode(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseMode(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, m := range []Mode{ExactlyOnce, AtLeastOnce, Unaligned} {
		if got, err := ParseMode(m.String()); err != nil || got != m {
			t.Errorf("ParseMode(%q) = %v, %v; want %v", m.String(), got, err, m)
		}
	}
	for _, in := range []string{"", "exactly_once", "Unaligned", "none"} {
		if _, err := ParseMode(in); !errors.Is(err, ErrInvalidMode) || !strings.Contains(err.Error(), fmt.Sprintf("%q", in)) {
			t.Errorf("ParseMode(%q) error = %v; want ErrInvalidMode naming the input", in, err)
		}
	}
}

func TestNewHandlerRejectsBadConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  HandlerConfig
		want string
	}{
		{HandlerConfig{Channels: 0, Mode: ExactlyOnce}, "0 input channels"},
		{HandlerConfig{Channels: -1, Mode: ExactlyOnce}, "-1 input channels"},
		{HandlerConfig{Channels: 2}, "mode(0)"},
		{HandlerConfig{Channels: 2, Mode: Unaligned + 1}, "mode(4)"},
		{HandlerConfig{Channels: 2, Mode: ExactlyOnce, AlignedTimeout: -1}, "negative"},
		{HandlerConfig{Channels: 2, Mode: AtLeastOnce, AlignedTimeout: 10}, "exactly-once only"},
		{HandlerConfig{Channels: 2, Mode: Unaligned, AlignedTimeout: 10}, "exactly-once only"},
	} {
		h, err := NewHandler(tc.cfg)
		if h != nil || !errors.Is(err, ErrInvalidHandlerConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewHandler(%+v) = %v, %v; want ErrInvalidHandlerConfig mentioning %q", tc.cfg, h, err, tc.want)
		}
	}
}

// TestHandlerPanicsOnChannelOutOfRange: the methods without an error result
// refuse a channel index the subtask does not have.
func TestHandlerPanicsOnChannelOutOfRange(t *testing.T) {
	h, err := NewHandler(HandlerConfig{Channels: 2, Mode: ExactlyOnce})
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func(){
		"Data":          func() { h.Data(2, 1) },
		"Data negative": func() { h.Data(0, -1) },
		"End":           func() { h.End(0, -1) },
		"Cancel":        func() { h.Cancel(0, 5, 1) },
	} {
		func() {
			defer func() {
				r := recover()
				if r == nil || !strings.HasPrefix(fmt.Sprint(r), "subtask: ") {
					t.Errorf("%s: recovered %v; want a checkpoint panic", name, r)
				}
			}()
			f()
		}()
	}
}

// TestReadyHandsOverOnce: Ready returns each action once, and the caller
// owns the returned slice.
func TestReadyHandsOverOnce(t *testing.T) {
	h, err := NewHandler(HandlerConfig{Channels: 2, Mode: ExactlyOnce})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Barrier(1, 0, 1, KindCheckpoint); err != nil {
		t.Fatal(err)
	}
	first := h.Ready()
	if len(first) != 1 || first[0] != (Block{Ch: 0}) {
		t.Fatalf("Ready() = %v; want [block ch=0]", first)
	}
	if again := h.Ready(); len(again) != 0 {
		t.Fatalf("second Ready() = %v; want nothing", again)
	}
	if err := h.Barrier(2, 1, 1, KindCheckpoint); err != nil {
		t.Fatal(err)
	}
	_ = h.Ready()
	if first[0] != (Block{Ch: 0}) {
		t.Fatalf("an earlier Ready result changed to %v", first)
	}
}

// The randomized property test below drives a handler the way an obedient
// subtask does: a model input gate that never reads a blocked channel, fed
// from per-channel queues of data, barriers, cancel markers and an end, with
// ticks and coordinator aborts mixed in. It checks, after every event, the
// promises the handler makes to its subtask.

type handlerSimKind uint8

const (
	handlerSimData handlerSimKind = iota
	handlerSimBarrier
	handlerSimCancel
	handlerSimEnd
)

type handlerSimMsg struct {
	kind  handlerSimKind
	id    int64
	ckind Kind
	bytes int
}

// handlerSimQueues generates the input of each channel: for checkpoints 1..ids, a
// few data messages then (usually) the barrier, sometimes a cancel marker
// or nothing (the upstream dropped it without telling); some channels end
// early. Every channel ends.
func handlerSimQueues(rng *rand.Rand, channels, ids int, kinds []Kind) [][]handlerSimMsg {
	qs := make([][]handlerSimMsg, channels)
	for ch := range qs {
		last := ids
		if rng.IntN(3) == 0 {
			last = rng.IntN(ids + 1)
		}
		var q []handlerSimMsg
		data := func() {
			for range rng.IntN(4) {
				q = append(q, handlerSimMsg{kind: handlerSimData, bytes: 1 + rng.IntN(100)})
			}
		}
		for id := 1; id <= last; id++ {
			data()
			switch r := rng.IntN(20); {
			case r < 16:
				q = append(q, handlerSimMsg{kind: handlerSimBarrier, id: int64(id), ckind: kinds[id]})
			case r < 18:
				q = append(q, handlerSimMsg{kind: handlerSimCancel, id: int64(id)})
			}
		}
		data()
		qs[ch] = append(q, handlerSimMsg{kind: handlerSimEnd})
	}
	return qs
}

type handlerSimStats struct {
	aligned, unaligned, switched, savepoints, cancels, captures int
}

func TestHandlerRandomized(t *testing.T) {
	configs := []struct {
		mode    Mode
		timeout int64
	}{
		{ExactlyOnce, 0},
		{ExactlyOnce, 12},
		{AtLeastOnce, 0},
		{Unaligned, 0},
	}
	for _, c := range configs {
		t.Run(fmt.Sprintf("%s/timeout=%d", c.mode, c.timeout), func(t *testing.T) {
			var stats handlerSimStats
			for channels := 1; channels <= 4; channels++ {
				for seed := range uint64(300) {
					cfg := HandlerConfig{Channels: channels, Mode: c.mode, AlignedTimeout: c.timeout}
					rng := rand.New(rand.NewPCG(seed, uint64(channels)))
					if msg := simulateHandler(rng, cfg, &stats); msg != "" {
						t.Fatalf("channels=%d seed=%d: %s", channels, seed, msg)
					}
				}
			}
			// The runs must have exercised what they check.
			if stats.savepoints == 0 || stats.cancels == 0 {
				t.Errorf("too little coverage: %+v", stats)
			}
			switch {
			case c.mode == Unaligned && (stats.unaligned == 0 || stats.captures == 0):
				t.Errorf("no unaligned snapshot with captures: %+v", stats)
			case c.mode != Unaligned && stats.aligned == 0:
				t.Errorf("no aligned snapshot: %+v", stats)
			case c.timeout > 0 && (stats.switched == 0 || stats.captures == 0):
				t.Errorf("the aligned timeout never switched a checkpoint: %+v", stats)
			}
		})
	}
}

// simulateHandler runs one random scenario and returns a description of the first
// broken promise, or "".
func simulateHandler(rng *rand.Rand, cfg HandlerConfig, stats *handlerSimStats) string {
	const ids = 6
	kinds := make([]Kind, ids+1)
	for id := range kinds {
		kinds[id] = KindCheckpoint
		if rng.IntN(5) == 0 {
			kinds[id] = KindSavepoint
		}
	}
	n := cfg.Channels
	queues := handlerSimQueues(rng, n, ids, kinds)
	h, err := NewHandler(cfg)
	if err != nil {
		return err.Error()
	}

	var (
		now        int64
		blocked    = make([]bool, n)
		ended      = make([]bool, n)
		seen       = make([]int64, n) // newest barrier or cancel marker read per channel
		capturing  = make([]int64, n) // id captured per channel, 0 for none
		snapped    = map[int64]bool{}
		dirty      = map[int64]bool{} // data read after the barrier, before the snapshot
		openCap    = map[int64]bool{} // unaligned snapshots awaiting ChannelStateDone
		cancelled  = map[int64]bool{}
		lastSnap   int64
		log        []string
		aligns     = cfg.Mode != AtLeastOnce
		readable   = make([]int, 0, n)
		violationf = func(format string, args ...any) string {
			return fmt.Sprintf(format, args...) + "\nevents:\n" + strings.Join(log, "\n")
		}
	)

	for {
		readable = readable[:0]
		remaining := false
		for ch := range queues {
			if len(queues[ch]) > 0 {
				remaining = true
				if !blocked[ch] {
					readable = append(readable, ch)
				}
			}
		}
		if !remaining {
			break
		}
		if len(readable) == 0 {
			return violationf("deadlock: every channel with input left is blocked")
		}

		now += int64(rng.IntN(4))
		evCh := -1
		isTick := false
		switch r := rng.IntN(100); {
		case r < 10:
			isTick = true
			log = append(log, fmt.Sprintf("tick now=%d", now))
			h.Tick(now)
		case r < 12:
			id := 1 + rng.Int64N(ids+1)
			log = append(log, fmt.Sprintf("abort id=%d", id))
			h.Abort(id, "aborted")
		default:
			ch := readable[rng.IntN(len(readable))]
			evCh = ch
			m := queues[ch][0]
			queues[ch] = queues[ch][1:]
			switch m.kind {
			case handlerSimData:
				log = append(log, fmt.Sprintf("data ch=%d bytes=%d", ch, m.bytes))
				for id := int64(1); id <= seen[ch]; id++ {
					if !snapped[id] {
						dirty[id] = true
					}
				}
				for id := range openCap {
					if seen[ch] < id && capturing[ch] != id {
						return violationf("data on channel %d before barrier %d after its unaligned snapshot is not captured", ch, id)
					}
				}
				if capturing[ch] != 0 && seen[ch] >= capturing[ch] {
					return violationf("data on channel %d after barrier %d is still captured", ch, capturing[ch])
				}
				h.Data(ch, m.bytes)
			case handlerSimBarrier:
				log = append(log, fmt.Sprintf("barrier ch=%d id=%d now=%d kind=%s", ch, m.id, now, m.ckind))
				seen[ch] = m.id
				if err := h.Barrier(now, ch, m.id, m.ckind); err != nil {
					return violationf("Barrier: %v", err)
				}
			case handlerSimCancel:
				log = append(log, fmt.Sprintf("cancel ch=%d id=%d", ch, m.id))
				seen[ch] = m.id
				h.Cancel(now, ch, m.id)
			case handlerSimEnd:
				log = append(log, fmt.Sprintf("end ch=%d now=%d", ch, now))
				ended[ch] = true
				h.End(now, ch)
			}
		}

		pendingID, pending := h.Pending()
		alignedSnap := false
		for _, a := range h.Ready() {
			log = append(log, "  "+a.String())
			switch a := a.(type) {
			case Block:
				switch {
				case !aligns:
					return violationf("%s in %s mode", a, cfg.Mode)
				case blocked[a.Ch] || ended[a.Ch]:
					return violationf("%s: the channel is blocked or ended", a)
				case !pending || seen[a.Ch] != pendingID:
					return violationf("%s: the channel did not deliver the pending barrier", a)
				}
				blocked[a.Ch] = true
			case Unblock:
				if !blocked[a.Ch] {
					return violationf("%s: the channel is not blocked", a)
				}
				blocked[a.Ch] = false
			case Snapshot:
				switch {
				case snapped[a.ID]:
					return violationf("second snapshot of %d", a.ID)
				case a.ID <= lastSnap:
					return violationf("snapshot %d after snapshot %d", a.ID, lastSnap)
				case a.Kind != kinds[a.ID]:
					return violationf("%s: want kind %s", a, kinds[a.ID])
				case aligns && dirty[a.ID]:
					return violationf("%s: data that followed the barrier was read before the snapshot", a)
				case a.Unaligned && a.Kind == KindSavepoint:
					return violationf("%s: savepoints are aligned", a)
				case a.Unaligned && cfg.Mode == ExactlyOnce && (!isTick || cfg.AlignedTimeout == 0):
					return violationf("%s: exactly-once switches to unaligned only on a tick past the timeout", a)
				case a.Unaligned && cfg.Mode == ExactlyOnce && (now-a.FirstBarrier < cfg.AlignedTimeout || a.Alignment != now-a.FirstBarrier):
					return violationf("%s at %d: switched before the timeout of %dms, or with a wrong alignment", a, now, cfg.AlignedTimeout)
				case a.Unaligned && cfg.Mode == AtLeastOnce:
					return violationf("%s in at-least-once mode", a)
				case !a.Unaligned && cfg.Mode == Unaligned && a.Kind == KindCheckpoint:
					return violationf("%s: unaligned mode takes unaligned checkpoints", a)
				case cfg.Mode == Unaligned && a.Unaligned && evCh >= 0 && seen[evCh] != a.ID:
					return violationf("%s: not taken at its first barrier", a)
				}
				if aligns && !a.Unaligned {
					// Every other channel that delivered the barrier is
					// still blocked: nothing after it was read.
					for ch := range n {
						if ch != evCh && seen[ch] == a.ID && !ended[ch] && !blocked[ch] {
							return violationf("%s: channel %d delivered the barrier and is not blocked", a, ch)
						}
					}
				}
				snapped[a.ID] = true
				lastSnap = a.ID
				switch {
				case a.Unaligned:
					openCap[a.ID] = true
					stats.unaligned++
					if cfg.Mode == ExactlyOnce {
						stats.switched++
					}
				default:
					alignedSnap = true
					stats.aligned++
				}
				if a.Kind == KindSavepoint {
					stats.savepoints++
				}
			case CaptureStart:
				switch {
				case !openCap[a.ID]:
					return violationf("%s: no unaligned snapshot of %d is open", a, a.ID)
				case capturing[a.Ch] != 0 || ended[a.Ch] || seen[a.Ch] >= a.ID:
					return violationf("%s: channel capturing, ended or past the barrier", a)
				}
				capturing[a.Ch] = a.ID
				stats.captures++
			case CaptureEnd:
				if capturing[a.Ch] != a.ID {
					return violationf("%s: channel %d captures %d", a, a.Ch, capturing[a.Ch])
				}
				capturing[a.Ch] = 0
			case ChannelStateDone:
				if !openCap[a.ID] {
					return violationf("%s: no unaligned snapshot of %d is open", a, a.ID)
				}
				for ch := range n {
					if capturing[ch] == a.ID {
						return violationf("%s while channel %d still captures it", a, ch)
					}
					if !ended[ch] && seen[ch] < a.ID {
						return violationf("%s before barrier %d on channel %d", a, a.ID, ch)
					}
				}
				delete(openCap, a.ID)
			case ForwardCancel:
				switch {
				case cancelled[a.ID]:
					return violationf("%s: cancelled twice", a)
				case snapped[a.ID] && !openCap[a.ID]:
					return violationf("%s: the snapshot was already complete", a)
				}
				cancelled[a.ID] = true
				delete(openCap, a.ID)
				stats.cancels++
			default:
				return violationf("unknown action %T", a)
			}
		}
		for ch := range n {
			if capturing[ch] != 0 && !openCap[capturing[ch]] {
				return violationf("channel %d still captures %d, which is closed", ch, capturing[ch])
			}
			if alignedSnap && blocked[ch] {
				return violationf("channel %d stays blocked after an aligned snapshot", ch)
			}
		}
		if pending && !slices.Contains(seen, pendingID) {
			return violationf("checkpoint %d pending, but no channel delivered its barrier", pendingID)
		}
	}

	// Every channel has ended.
	if id, ok := h.Pending(); ok {
		return violationf("checkpoint %d still pending after every channel ended", id)
	}
	for ch := range n {
		if blocked[ch] || capturing[ch] != 0 {
			return violationf("channel %d still blocked or captured at the end", ch)
		}
	}
	if len(openCap) != 0 {
		return violationf("unaligned snapshots never finished: %v", openCap)
	}
	return ""
}
