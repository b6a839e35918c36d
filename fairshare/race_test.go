//go:build race

package fairshare

// raceEnabled shortens the single-goroutine model runs, which the race
// detector slows down without checking anything more.
const raceEnabled = true
