"""TF1 graphs whose global step takes each form autolog must read: found by
``tf.compat.v1.train.get_global_step()``, only by the GLOBAL_STEP collection, or only by the
name ``global_step``, int32 and int64, each as a ``tf.compat.v1.Variable`` (ref or resource as
the behaviour below says), and last issue 26's ``tf.Variable(0, name="global_step",
trainable=False)``, a resource variable in every behaviour, which ``get_global_step()`` rejects.

``argv[1]`` picks TensorFlow's behaviour for the whole process: ``v2`` (the TF 2.x default:
resource variables even in graph mode), ``v1`` (``disable_v2_behavior()``: ref variables) or
``v2-ref`` (``disable_resource_variables()`` only). Form k counts its step from 100 * k to
100 * k + 3, so each form's last step is told apart in the metric lines. No distlaunch code.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf

v1 = tf.compat.v1
if sys.argv[1] == "v1":
    v1.disable_v2_behavior()
elif sys.argv[1] == "v2-ref":
    v1.disable_resource_variables()


def make_step(found_by, dtype):
    if found_by == "get_global_step" and dtype == tf.int64:
        return v1.train.get_or_create_global_step()
    if found_by == "get_global_step":
        return v1.get_variable("global_step", [], tf.int32, initializer=v1.zeros_initializer(), trainable=False,
                               collections=[v1.GraphKeys.GLOBAL_VARIABLES, v1.GraphKeys.GLOBAL_STEP])
    if found_by == "collection":
        step = v1.Variable(0, dtype=dtype, name="step_counter", trainable=False)
        v1.add_to_collection(v1.GraphKeys.GLOBAL_STEP, step)
        return step
    if found_by == "name":
        return v1.Variable(0, dtype=dtype, name="global_step", trainable=False)
    return tf.Variable(0, name="global_step", trainable=False)


FORMS = [(found_by, dtype) for found_by in ("get_global_step", "collection", "name") for dtype in (tf.int32, tf.int64)]
FORMS.append(("tf.Variable-name", tf.int32))
for k, (found_by, dtype) in enumerate(FORMS, 1):
    with tf.Graph().as_default():
        step = make_step(found_by, dtype)
        kind = "resource" if step.op.type == "VarHandleOp" else "ref"
        start = v1.assign(step, 100 * k)
        tick = v1.assign_add(step, 1)
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            sess.run(start)
            for _ in range(3):
                sess.run(tick)
        print("FORM %d %s %s %s %d" % (k, found_by, dtype.name, kind, 100 * k + 3), flush=True)
