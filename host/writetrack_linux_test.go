//go:build linux && (amd64 || arm64)

package host

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// requireTracking skips the test where the kernel cannot track writes:
// before Linux 6.7, or where userfaultfd is not allowed (a container's
// seccomp profile). Where both hold, tracking must work.
func requireTracking(t *testing.T) {
	t.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	rel := unix.ByteSliceToString(u.Release[:])
	major, rest, _ := strings.Cut(rel, ".")
	minorStr, _, _ := strings.Cut(rest, ".")
	maj, err1 := strconv.Atoi(major)
	minor, err2 := strconv.Atoi(strings.TrimRightFunc(minorStr, func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil {
		t.Fatalf("kernel release %q", rel)
	}
	if maj < 6 || maj == 6 && minor < 7 {
		t.Skipf("kernel %s has no asynchronous write-protect (6.7 and later)", rel)
	}
	fd, _, e := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|uffdUserModeOnly, 0, 0)
	if e != 0 {
		t.Skipf("userfaultfd is not allowed here: %v", e)
	}
	unix.Close(int(fd))
	if uffd, pm := tracking(); uffd < 0 || pm < 0 {
		t.Fatalf("kernel %s allows userfaultfd, but write tracking could not be set up", rel)
	}
}

// readSink keeps TestWriteTracker's reads from being left out.
var readSink byte

// TestWriteTracker: the tracker lists exactly the pages written since the
// range was protected, whether they were in memory before or not, and
// whether the process or the kernel (a read(2) into the range) wrote them;
// protecting again forgets them.
func TestWriteTracker(t *testing.T) {
	requireTracking(t)
	const pages = 64
	r, err := reserve(pages * uint64(hostPage))
	if err != nil {
		t.Fatal(err)
	}
	defer r.release()
	if err := r.commit(pages * uint64(hostPage)); err != nil {
		t.Fatal(err)
	}
	mem := r.mem
	page := func(p int) []byte { return mem[p*hostPage : (p+1)*hostPage] }
	// Pages 1 and 2 in memory before the range is protected.
	page(1)[0], page(2)[5] = 1, 1
	tr := trackWrites(mem)
	if tr == nil {
		t.Fatal("no tracker")
	}
	list := func() []int {
		var ps []int
		if !tr.written(func(lo, hi int) {
			for off := lo; off < hi; off += hostPage {
				ps = append(ps, off/hostPage)
			}
		}) {
			t.Fatal("written failed")
		}
		return ps
	}
	if got := list(); len(got) != 0 {
		t.Fatalf("written after protecting: %v, want none", got)
	}
	page(2)[7] = 9                      // in memory before
	page(10)[hostPage-1] = 1            // never touched before
	page(11)[0], page(12)[0] = 1, 1     // a run
	page(pages - 1)[100] = 3            // the last page
	readSink = page(20)[0] + page(1)[1] // reads only
	fds := make([]int, 2)
	if err := unix.Pipe(fds); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	if _, err := unix.Write(fds[1], []byte("kernel")); err != nil {
		t.Fatal(err)
	}
	if n, err := unix.Read(fds[0], page(30)[10:20]); err != nil || n != 6 {
		t.Fatalf("read into page 30: %d, %v", n, err)
	}
	want := []int{2, 10, 11, 12, 30, pages - 1}
	if got := list(); !slices.Equal(got, want) {
		t.Fatalf("written pages %v, want %v", got, want)
	}
	if !tr.protect() {
		t.Fatal("protect failed")
	}
	page(40)[0] = 1
	if got := list(); !slices.Equal(got, []int{40}) {
		t.Fatalf("written after protecting again: %v, want [40]", got)
	}
}
