//go:build !race

package fairshare

const raceEnabled = false
