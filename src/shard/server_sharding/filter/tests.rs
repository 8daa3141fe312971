use std::sync::Mutex;

use tokio::sync::mpsc;

use super::*;

#[test]
fn only_cluster_wide_collections_of_sharded_kinds_are_sharded() {
    let get = http::Method::GET;
    assert!(is_sharded_collection(&get, "/api/v1/configmaps"));
    assert!(is_sharded_collection(&get, "/api/v1/secrets"));
    assert!(is_sharded_collection(&get, "/apis/apps/v1/deployments"));
    assert!(is_sharded_collection(
        &get,
        "/apis/argoproj.io/v1alpha1/rollouts"
    ));
    for every_kind in [
        "/apis/apps/v1/statefulsets",
        "/apis/apps/v1/daemonsets",
        "/apis/batch/v1/cronjobs",
        "/apis/batch/v1/jobs",
        "/apis/apps.openshift.io/v1/deploymentconfigs",
        "/apis/secrets-store.csi.x-k8s.io/v1/secretproviderclasspodstatuses",
    ] {
        assert!(is_sharded_collection(&get, every_kind), "{every_kind}");
    }
    assert!(
        !is_sharded_collection(&get, "/api/v1/namespaces"),
        "cluster-scoped"
    );
    assert!(
        !is_sharded_collection(&get, "/api/v1/namespaces/a/configmaps"),
        "one namespace: nothing to shard"
    );
    assert!(!is_sharded_collection(
        &get,
        "/api/v1/namespaces/a/configmaps/x"
    ));
    assert!(!is_sharded_collection(
        &get,
        "/apis/coordination.k8s.io/v1/leases"
    ));
    assert!(!is_sharded_collection(
        &http::Method::PATCH,
        "/apis/apps/v1/deployments"
    ));
}

#[test]
fn the_selector_is_appended_encoded_and_never_twice() {
    let uri: Uri = "https://api:6443/api/v1/configmaps?watch=true&resourceVersion=5"
        .parse()
        .unwrap();
    let selector = "shardRange(object.metadata.namespace, '0x00', '0x10') || x";
    let sharded = with_selector(&uri, selector).unwrap();
    let query = sharded.query().unwrap();
    assert!(query.starts_with("watch=true&resourceVersion=5&shardSelector="));
    let value = query.split("shardSelector=").nth(1).unwrap();
    let decoded = percent_encoding::percent_decode_str(value)
        .decode_utf8()
        .unwrap();
    assert_eq!(decoded, selector);
    assert!(!value.contains(' ') && !value.contains('|') && !value.contains('\''));
    assert_eq!(sharded.authority(), uri.authority());
    assert!(
        with_selector(&sharded, "other").is_none(),
        "already carries one"
    );
    let bare: Uri = "/api/v1/secrets".parse().unwrap();
    assert!(
        with_selector(&bare, "s")
            .unwrap()
            .to_string()
            .ends_with("/api/v1/secrets?shardSelector=s")
    );
}

#[test]
fn a_json_chunk_is_cut_after_its_first_event_boundary() {
    let cut = |chunk: &[u8]| Framing::Lines(false).advance(chunk);
    assert_eq!(cut(b"}\n{\"type\""), Some(2));
    assert_eq!(cut(b"\n"), Some(1));
    assert_eq!(cut(b"{\"type\":\"ADDED\""), None);
}

/// A protobuf frame: its length (4 bytes, big-endian) and `len` bytes of event.
fn frame(len: u8) -> Vec<u8> {
    let mut frame = vec![0, 0, 0, len];
    frame.extend(std::iter::repeat_n(b'\n', len as usize));
    frame
}

#[test]
fn a_protobuf_chunk_is_cut_after_its_first_whole_frame_wherever_the_chunks_split() {
    let start = Framing::of(Some("application/vnd.kubernetes.protobuf;stream=watch"));
    assert!(start.at_boundary());
    // Newlines inside an event are bytes like any other: only lengths delimit.
    let stream: Vec<u8> = [frame(3), frame(0), frame(5)].concat();
    assert_eq!(start.clone().advance(&stream), Some(7));
    // Split at every offset: the first boundary is where the first frame ends, counted in
    // the chunk it ends in, and the state after both halves is between frames.
    for split in 1..stream.len() {
        let mut framing = start;
        let first = framing.advance(&stream[..split]);
        let second = framing.advance(&stream[split..]);
        match split {
            ..7 => assert_eq!((first, second), (None, Some(7 - split)), "split at {split}"),
            _ => assert_eq!(first, Some(7), "split at {split}"),
        }
        assert!(framing.at_boundary(), "split at {split}");
    }
    let mut framing = start;
    assert_eq!(framing.advance(&[0, 0]), None);
    assert!(!framing.at_boundary(), "half a length is mid-frame");
}

/// A response body fed chunk by chunk by the test.
struct ChunkBody(mpsc::UnboundedReceiver<Bytes>);

impl Body for ChunkBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0.poll_recv(cx).map(|c| c.map(|c| Ok(Frame::data(c))))
    }
}

/// Records the URI of each request and answers with the next body, in `content_type`.
struct Server {
    seen: Arc<Mutex<Vec<Uri>>>,
    bodies: Arc<Mutex<Vec<ChunkBody>>>,
    content_type: Option<&'static str>,
}

impl Service<Request<()>> for Server {
    type Response = Response<ChunkBody>;
    type Error = std::convert::Infallible;
    type Future = std::future::Ready<Result<Response<ChunkBody>, Self::Error>>;
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }
    fn call(&mut self, req: Request<()>) -> Self::Future {
        self.seen.lock().unwrap().push(req.uri().clone());
        let body = self.bodies.lock().unwrap().remove(0);
        let mut response = Response::new(body);
        if let Some(content_type) = self.content_type {
            let value = http::HeaderValue::from_static(content_type);
            response
                .headers_mut()
                .insert(http::header::CONTENT_TYPE, value);
        }
        std::future::ready(Ok(response))
    }
}

struct Setup {
    feed: SelectorFeed,
    service: ServerFilter<Server>,
    seen: Arc<Mutex<Vec<Uri>>>,
    chunks: mpsc::UnboundedSender<Bytes>,
}

fn setup() -> Setup {
    setup_answering(None)
}

/// As [`setup`], the server's answers in `content_type`.
fn setup_answering(content_type: Option<&'static str>) -> Setup {
    let feed = SelectorFeed::default();
    let (chunks, rx) = mpsc::unbounded_channel();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let server = Server {
        seen: seen.clone(),
        bodies: Arc::new(Mutex::new(vec![ChunkBody(rx)])),
        content_type,
    };
    Setup {
        service: feed.layer().layer(server),
        feed,
        seen,
        chunks,
    }
}

async fn next_chunk<B: Body<Data = Bytes> + Unpin>(body: &mut B) -> Option<Bytes>
where
    B::Error: std::fmt::Debug,
{
    std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx))
        .await
        .map(|f| f.unwrap().into_data().unwrap())
}

fn request(uri: &str) -> Request<()> {
    Request::get(uri).body(()).unwrap()
}

#[tokio::test]
async fn a_watch_ends_at_the_first_boundary_after_the_selector_changed() {
    let mut s = setup();
    s.feed.publish(Some("A".into()));
    let response = s
        .service
        .call(request("/api/v1/configmaps?watch=true"))
        .await
        .unwrap();
    assert!(
        s.seen.lock().unwrap()[0]
            .query()
            .unwrap()
            .ends_with("&shardSelector=A")
    );
    let mut body = response.into_body();
    s.chunks
        .send(Bytes::from_static(b"{\"a\":1}\n{\"b\""))
        .unwrap();
    assert_eq!(
        next_chunk(&mut body).await.unwrap(),
        &b"{\"a\":1}\n{\"b\""[..]
    );
    assert!(
        !s.feed.publish(Some("A".into())),
        "the same selector is no change"
    );
    assert!(s.feed.publish(Some("B".into())));
    s.chunks
        .send(Bytes::from_static(b":2}\n{\"c\":3}\n"))
        .unwrap();
    assert_eq!(
        next_chunk(&mut body).await.unwrap(),
        &b":2}\n"[..],
        "the event in progress is finished, the next one is left to the new watch"
    );
    assert!(next_chunk(&mut body).await.is_none());
}

#[tokio::test]
async fn a_protobuf_watch_ends_after_the_frame_in_progress() {
    let mut s = setup_answering(Some("application/vnd.kubernetes.protobuf;stream=watch"));
    s.feed.publish(Some("A".into()));
    let response = s
        .service
        .call(request("/api/v1/configmaps?watch=true"))
        .await
        .unwrap();
    let mut body = response.into_body();
    let stream: Vec<u8> = [frame(4), frame(2)].concat();
    s.chunks.send(Bytes::copy_from_slice(&stream[..6])).unwrap();
    assert_eq!(next_chunk(&mut body).await.unwrap(), &stream[..6]);
    assert!(s.feed.publish(Some("B".into())));
    s.chunks.send(Bytes::copy_from_slice(&stream[6..])).unwrap();
    assert_eq!(
        next_chunk(&mut body).await.unwrap(),
        &stream[6..8],
        "the frame in progress is finished (its newlines are not boundaries)"
    );
    assert!(next_chunk(&mut body).await.is_none());
}

#[tokio::test]
async fn an_idle_watch_ends_as_soon_as_the_selector_changes() {
    let mut s = setup();
    s.feed.publish(Some("A".into()));
    let mut body = s
        .service
        .call(request("/apis/apps/v1/deployments?watch=1"))
        .await
        .unwrap()
        .into_body();
    let feed = s.feed.clone();
    tokio::spawn(async move {
        tokio::task::yield_now().await;
        feed.publish(None);
    });
    assert!(
        next_chunk(&mut body).await.is_none(),
        "ends without any chunk"
    );
    drop(s.chunks);
}

#[tokio::test]
async fn a_watch_opened_without_a_selector_reopens_once_one_is_published() {
    let mut s = setup();
    let unsharded = "/api/v1/configmaps?watch=true";
    let mut body = s
        .service
        .call(request(unsharded))
        .await
        .unwrap()
        .into_body();
    assert_eq!(
        s.seen.lock().unwrap()[0],
        unsharded,
        "no selector published: none sent"
    );
    s.chunks.send(Bytes::from_static(b"{}\n")).unwrap();
    assert_eq!(next_chunk(&mut body).await.unwrap(), &b"{}\n"[..]);
    s.feed.publish(Some("A".into()));
    assert!(
        next_chunk(&mut body).await.is_none(),
        "ends, to re-open with the selector"
    );
}

#[tokio::test]
async fn other_requests_pass_through_untouched() {
    let mut s = setup();
    s.feed.publish(Some("A".into()));
    let namespaced = "/api/v1/namespaces/a/configmaps?watch=true";
    let mut body = s
        .service
        .call(request(namespaced))
        .await
        .unwrap()
        .into_body();
    assert_eq!(s.seen.lock().unwrap()[0], namespaced);
    s.feed.publish(Some("B".into()));
    s.chunks.send(Bytes::from_static(b"{}\n")).unwrap();
    assert_eq!(
        next_chunk(&mut body).await.unwrap(),
        &b"{}\n"[..],
        "a namespaced watch does not end when the selector changes"
    );
    drop(s.chunks);
    assert!(next_chunk(&mut body).await.is_none());
}

#[tokio::test]
async fn a_list_carries_the_selector_and_its_body_is_untouched() {
    let mut s = setup();
    s.feed.publish(Some("A".into()));
    let mut body = s
        .service
        .call(request("/api/v1/secrets?limit=500"))
        .await
        .unwrap()
        .into_body();
    assert_eq!(
        s.seen.lock().unwrap()[0],
        "/api/v1/secrets?limit=500&shardSelector=A"
    );
    s.feed.publish(Some("B".into()));
    s.chunks.send(Bytes::from_static(b"{\"items\":[")).unwrap();
    assert_eq!(next_chunk(&mut body).await.unwrap(), &b"{\"items\":["[..]);
}

fn ranges_assignment(generation: u64, members: &[&str]) -> Arc<crate::shard::Assignment> {
    Arc::new(crate::shard::Assignment {
        generation,
        members: members.iter().map(|m| m.to_string()).collect(),
        scheme: crate::shard::Scheme::HashRanges,
        ..Default::default()
    })
}

/// Whether `selector` (as `selector_of` writes it) selects `namespace`.
fn selects(selector: &str, namespace: &str) -> bool {
    let hash = u128::from(crate::shard::ranges::fnv1a64(namespace));
    selector.split(" || ").any(|range| {
        let bounds: Vec<u128> = range
            .split('\'')
            .filter_map(|p| p.strip_prefix("0x"))
            .map(|h| u128::from_str_radix(h, 16).unwrap())
            .collect();
        bounds[0] <= hash && hash < bounds[1]
    })
}

#[test]
fn the_selector_covers_the_previous_assignment_until_it_is_released() {
    let three = ranges_assignment(1, &["a", "b", "c"]);
    let four = ranges_assignment(2, &["a", "b", "c", "d"]);
    let mut view = ShardView::default();
    assert_eq!(selector_of(&view, "a"), None, "no assignment yet");
    view.install(three.clone());
    view.install(four.clone());
    let overlap = selector_of(&view, "a").unwrap();
    view.release_previous(2);
    let released = selector_of(&view, "a").unwrap();
    let namespaces: Vec<String> = (0..2000).map(|i| format!("tenant-{i:05}")).collect();
    for ns in &namespaces {
        let (before, after) = (three.owner(ns) == Some("a"), four.owner(ns) == Some("a"));
        assert_eq!(
            selects(&overlap, ns),
            before || after,
            "{ns} during the overlap"
        );
        assert_eq!(selects(&released, ns), after, "{ns} once released");
    }
    assert!(overlap.len() > released.len());
}

#[test]
fn no_selector_while_an_assignment_is_rendezvous() {
    let mut view = ShardView::default();
    view.install(Arc::new(crate::shard::Assignment {
        generation: 1,
        members: vec!["a".into(), "b".into()],
        ..Default::default()
    }));
    view.install(ranges_assignment(2, &["a", "b"]));
    assert_eq!(
        selector_of(&view, "a"),
        None,
        "the previous one is rendezvous"
    );
    view.release_previous(2);
    assert!(selector_of(&view, "a").is_some());
    assert_eq!(selector_of(&view, "z"), None, "a non-member owns nothing");
}

#[test]
fn a_covering_selector_selects_the_gained_namespaces_and_few_others() {
    let three = ranges_assignment(1, &["a", "b", "c"]);
    let two = ranges_assignment(2, &["a", "b"]);
    let mut view = ShardView::default();
    view.install(three.clone());
    view.install(two.clone());
    let namespaces: Vec<String> = (0..4000).map(|i| format!("tenant-{i:05}")).collect();
    let gained: Vec<String> = namespaces
        .iter()
        .filter(|ns| three.owner(ns) == Some("c") && two.owner(ns) == Some("a"))
        .cloned()
        .collect();
    assert!(gained.len() > 100, "a takes over part of c's share");
    let covering = covering_selector(&view, "a", &gained).unwrap();
    let selected: Vec<&String> = namespaces
        .iter()
        .filter(|ns| selects(&covering, ns))
        .collect();
    for ns in &gained {
        assert!(selects(&covering, ns), "{ns} was gained");
    }
    for ns in &selected {
        assert_eq!(two.owner(ns), Some("a"), "{ns}: only a's own ranges");
    }
    let whole_share = namespaces
        .iter()
        .filter(|ns| two.owner(ns) == Some("a"))
        .count();
    assert!(
        selected.len() < whole_share / 2,
        "{} selected of a's {whole_share}: the gained part, not the whole share",
        selected.len()
    );
    assert_eq!(covering_selector(&view, "a", &[]), None, "nothing gained");
    assert_eq!(covering_selector(&view, "z", &gained), None, "not a member");
}

#[test]
fn a_covering_selector_spans_the_previous_assignment_until_released_and_every_namespace() {
    let three = ranges_assignment(1, &["a", "b", "c"]);
    let two = ranges_assignment(2, &["b", "c"]);
    let mut view = ShardView::default();
    view.install(three.clone());
    view.install(two);
    let leaving: Vec<String> = (0..4000)
        .map(|i| format!("tenant-{i:05}"))
        .filter(|ns| three.owner(ns) == Some("a"))
        .take(3)
        .collect();
    let covering = covering_selector(&view, "a", &leaving).expect("a still acts on them");
    assert!(leaving.iter().all(|ns| selects(&covering, ns)));
    view.release_previous(2);
    assert_eq!(
        covering_selector(&view, "a", &leaving),
        None,
        "released: none of them lies in a's ranges, so no selector could list them"
    );
}
