//! `boxtable-operator key`: prints a lock identity that maps a lock back to its table.

use std::process::Command;

fn key(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_boxtable-operator"))
        .arg("key")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn key_for_a_table_prints_the_lowercased_identity_and_a_holder_query() {
    let (ok, out, _) = key(&["--schema", "Billing", "--table", "Outbox"]);
    assert!(ok);
    assert!(
        out.contains("lockKey:  BrighterMigration_billing.outbox"),
        "{out}"
    );
    assert!(out.contains("key:      5156097636185337276"), "{out}");
    assert!(out.contains("keyHex:   478e237b600eedbc"), "{out}");
    assert!(out.contains("classid:  1200497531"), "{out}");
    assert!(out.contains("objid:    1611591100"), "{out}");
    assert!(
        out.contains("l.classid = 1200497531 AND l.objid = 1611591100 AND l.objsubid = 1"),
        "{out}"
    );
}

#[test]
fn key_for_a_verbatim_lock_key_keeps_its_case() {
    let (ok, out, _) = key(&["BrighterMigration_public.Outbox"]);
    assert!(ok);
    assert!(out.contains("key:      6330443736081384332"), "{out}");
}

#[test]
fn key_schema_defaults_to_public() {
    let (ok, out, _) = key(&["--table", "inbox"]);
    assert!(ok);
    assert!(out.contains("key:      -1057658561702081089"), "{out}");
}

#[test]
fn key_refuses_an_invalid_table_name_with_the_rule() {
    let (ok, _, err) = key(&["--table", "orders;drop table x"]);
    assert!(!ok);
    assert!(err.contains("^[A-Za-z][A-Za-z0-9_]*$"), "{err}");
}
