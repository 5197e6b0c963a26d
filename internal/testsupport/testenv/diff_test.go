package testenv

import "testing"

func TestFirstDiff(t *testing.T) {
	for _, c := range []struct{ a, b, want string }{
		{"x\ny\nz", "x\ny\nz", "no line differs"},
		{"x\ny\nz", "x\nY\nz", "line 2:\n- \"y\"\n+ \"Y\""},
		{"x\ny ", "x\ny", "line 2:\n- \"y \"\n+ \"y\""},
		{"x", "x\n", "line 2:\n- \"\"\n+ \"\""},
		{"x\ny", "x", "line 2:\n- \"y\"\n+ \"\""},
	} {
		if got := FirstDiff(c.a, c.b); got != c.want {
			t.Errorf("FirstDiff(%q, %q) = %q, want %q", c.a, c.b, got, c.want)
		}
	}
}
