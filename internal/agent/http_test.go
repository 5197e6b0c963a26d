package agent

import "testing"

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:9197": true, "127.3.2.1:9197": true, "[::1]:9197": true, "localhost:9197": true,
		":9197": false, "0.0.0.0:9197": false, "[::]:9197": false, "10.0.0.5:9197": false,
		"[fd00::5]:9197": false, "node-a:9197": false, "[::ffff:127.0.0.1]:9197": true,
	} {
		got, err := Loopback(addr)
		if err != nil || got != want {
			t.Errorf("Loopback(%q) = %v, %v; want %v", addr, got, err, want)
		}
	}
	if _, err := Loopback("9197"); err == nil {
		t.Error("Loopback(9197): no error")
	}
}
