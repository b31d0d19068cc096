package testenv

import (
	"bytes"
	"encoding/xml"
	"testing"
)

// The config.d file of a cluster's server is well-formed and names every
// shard and replica, with internal replication, the host's own macros and
// the name its replicas fetch parts by.
func TestClusterConfig(t *testing.T) {
	layout := [][]clusterNode{
		{{Alias: "ch-s1-r1", Shard: 1, Replica: 1}, {Alias: "ch-s1-r2", Shard: 1, Replica: 2}},
		{{Alias: "ch-s2-r1", Shard: 2, Replica: 1}, {Alias: "ch-s2-r2", Shard: 2, Replica: 2}},
	}
	var b bytes.Buffer
	if err := clusterConfig.Execute(&b, map[string]any{"Cluster": ClusterName, "Shards": layout, "Self": layout[1][0], "User": "u", "Password": "p"}); err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Shards []struct {
			Internal bool `xml:"internal_replication"`
			Replicas []struct {
				Host string `xml:"host"`
				User string `xml:"user"`
			} `xml:"replica"`
		} `xml:"remote_servers>walhouse>shard"`
		Keeper      string `xml:"zookeeper>node>host"`
		Shard       string `xml:"macros>shard"`
		Replica     string `xml:"macros>replica"`
		Interserver string `xml:"interserver_http_host"`
	}
	if err := xml.Unmarshal(b.Bytes(), &cfg); err != nil {
		t.Fatalf("%v in\n%s", err, b.String())
	}
	if len(cfg.Shards) != 2 || cfg.Keeper != "keeper" || cfg.Shard != "2" || cfg.Replica != "ch-s2-r1" || cfg.Interserver != "ch-s2-r1" {
		t.Fatalf("config %+v from\n%s", cfg, b.String())
	}
	for i, s := range cfg.Shards {
		if !s.Internal || len(s.Replicas) != 2 || s.Replicas[0].Host != layout[i][0].Alias || s.Replicas[1].Host != layout[i][1].Alias || s.Replicas[0].User != "u" {
			t.Errorf("shard %d: %+v", i+1, s)
		}
	}
}
