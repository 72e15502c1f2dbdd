//! `SharedMessages`: a request's history is shared, so cloning is O(1), yet
//! it compares, iterates and collects like the `Vec<Message>` it replaced. Written for the
//! mutants cargo-mutants left alive in `core/src/model.rs`.

use agentloop_core::model::SharedMessages;
use agentloop_core::Message;

fn history(texts: &[&str]) -> SharedMessages {
    texts.iter().map(|t| Message::user(*t)).collect()
}

#[test]
fn a_clone_shares_and_an_equal_copy_does_not() {
    let a = history(&["hi", "there"]);
    let shared = a.clone();
    let copy = history(&["hi", "there"]);
    assert!(
        SharedMessages::ptr_eq(&a, &shared),
        "a clone is the same Arc"
    );
    assert!(!SharedMessages::ptr_eq(&a, &copy), "an equal copy is not");
    assert_eq!(a, copy, "equal contents compare equal");
    assert_ne!(a, history(&["hi"]), "different contents do not");
    assert_ne!(history(&["a"]), history(&["b"]));
}

#[test]
fn it_collects_iterates_and_copies_on_write() {
    let a = history(&["one", "two", "three"]);
    assert_eq!(a.len(), 3);
    let texts: Vec<&Message> = (&a).into_iter().collect();
    assert_eq!(
        texts,
        [
            &Message::user("one"),
            &Message::user("two"),
            &Message::user("three")
        ]
    );
    let mut b = a.clone();
    b.push(Message::user("four"));
    assert_eq!(a.len(), 3, "a write copies while the history is shared");
    assert_eq!(b.len(), 4);
    assert!(!SharedMessages::ptr_eq(&a, &b));
}
