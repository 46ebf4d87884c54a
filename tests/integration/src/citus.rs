//! The Citus cluster of `make citus-test` (scripts/citus-tests, scripts/citus-cluster): a
//! coordinator and two workers on this machine, at QUEEN_CITUS_PORT and the two ports after it.

use postgres::{Client, NoTls};

/// The coordinator's port; the workers listen on the next ones.
pub fn base_port() -> u16 {
    std::env::var("QUEEN_CITUS_PORT").expect("run through scripts/citus-tests (make citus-test)").parse().unwrap()
}

/// Node 0 is the coordinator, 1 and 2 the workers.
pub fn connect_node(node: u16, db: &str) -> Client {
    let port = base_port() + node;
    Client::connect(&format!("host=127.0.0.1 port={port} user=postgres dbname={db}"), NoTls)
        .unwrap_or_else(|e| panic!("cannot connect to node {node} ({port}/{db}): {e}"))
}

/// A database of its own on every node, with Citus created and the workers added to the
/// coordinator; queen is not created (tests do it on the coordinator, which propagates it).
pub struct CitusDb {
    pub name: String,
}

impl CitusDb {
    pub fn new(test: &str) -> CitusDb {
        let name = format!("citus_{test}");
        for node in 0..3 {
            let mut admin = connect_node(node, "postgres");
            admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).unwrap();
            admin.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
            connect_node(node, &name)
                .batch_execute("SET client_min_messages = warning; CREATE EXTENSION citus")
                .unwrap();
        }
        let base = base_port();
        connect_node(0, &name)
            .batch_execute(&format!(
                "SELECT citus_set_coordinator_host('127.0.0.1', {base});
                 SELECT citus_add_node('127.0.0.1', {}); SELECT citus_add_node('127.0.0.1', {});",
                base + 1,
                base + 2
            ))
            .unwrap();
        CitusDb { name }
    }

    pub fn coordinator(&self) -> Client {
        connect_node(0, &self.name)
    }

    pub fn worker(&self, n: u16) -> Client {
        connect_node(n, &self.name)
    }

    /// A connection to the coordinator as role `role` (an application's).
    pub fn coordinator_as(&self, role: &str) -> Client {
        let port = base_port();
        Client::connect(&format!("host=127.0.0.1 port={port} user={role} dbname={}", self.name), NoTls)
            .unwrap_or_else(|e| panic!("cannot connect as {role}: {e}"))
    }
}

/// Run `scripts/citus-cluster <args>` against this cluster (a node killed or started again).
pub fn cluster_script(args: &[&str]) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let status = std::process::Command::new(root.join("scripts/citus-cluster"))
        .args(args)
        .env("QUEEN_CITUS_PORT", base_port().to_string())
        .status()
        .expect("scripts/citus-cluster runs");
    assert!(status.success(), "scripts/citus-cluster {args:?}: {status}");
}

/// Worker `node` (1 or 2) stopped at once (`-m immediate`: a crash, as a killed machine).
pub fn kill_worker(node: u16) {
    cluster_script(&["kill", &node.to_string()]);
}

/// Worker `node` started again after [`kill_worker`].
pub fn restart_worker(node: u16) {
    cluster_script(&["restart", &node.to_string()]);
}
